// Manifold-constrained hyper-connections (model-v4.md §2.3): the per-token mixing weights of the hc
// residual streams (the coefficients and Sinkhorn are model/layers/mhc.h, shared with V4.1), and the
// final collapse (HCHead).
#pragma once

#include <cstdint>

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// For every row of X [N][hc·d]: pre [N][hc], post [N][hc], comb [N][hc][hc] (§2.3.1).
void hc_mix(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* pre, float* post, float* comb);

// HCHead: y[row] = Σ_j (sigmoid(m_j·scale + base_j) + hc_eps) · X[row][j] for N rows (§2.3.3).
void hc_head(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* y);

}  // namespace dsinfer::model::deepseek_v4
