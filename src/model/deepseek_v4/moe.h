// Mixture of experts of DeepSeek-V4 (model-v4.md §2.11): sqrt-softplus router scores (model/layers/router.h,
// shared with V4.1), selection by
// the token id table (hash layers) or by top-k of score + bias (bias for selection only), weights
// renormalised over the chosen experts and scaled, clamped SwiGLU experts with the route weight
// applied before the down projection, plus the shared expert (same clamp).
#pragma once

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// x: [N][d] (ffn_norm output) → y: [N][d].
void moe_forward(const MoeWeights& w, const LayerShape& ls, StepContext& ctx, const float* x, float* y);

}  // namespace dsinfer::model::deepseek_v4
