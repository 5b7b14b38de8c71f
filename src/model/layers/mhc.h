// Manifold-constrained hyper-connections shared by V4 and V4.1 (model-v4.md §2.3.1, model-v41.md §2.3):
// the per-row mixing coefficients from the row's projected mixes, with the Sinkhorn projection of the
// stream-mixing matrix. T is the scalar of the model's glue (float in V4, double in V4.1).
#pragma once

#include <cstdint>

namespace dsinfer::model::layers {

// In place on C [hc][hc] (row j = source stream): row softmax + eps, column normalisation, then
// iters − 1 times (row, column) normalisation, each denominator + eps (§2.3.1 step 5).
template <typename T>
void sinkhorn(T* c, int64_t hc, int64_t iters, T eps);

// One row's coefficients (§2.3.1 steps 3-5) from its mixes m [(2 + hc)·hc], already multiplied by the
// row's RMS factor, and the site's scale [3] and base [(2 + hc)·hc]:
//   pre[j]  = sigmoid(m[j]·scale[0] + base[j]) + hc_eps
//   post[j] = 2·sigmoid(m[hc + j]·scale[1] + base[hc + j])
//   comb    = sinkhorn(m[2hc + i]·scale[2] + base[2hc + i], iters, hc_eps)   [hc][hc]
template <typename T>
void hc_coefficients(const T* m, const float* scale, const float* base, int64_t hc, int64_t iters, T hc_eps, T* pre,
                     T* post, T* comb);

}  // namespace dsinfer::model::layers
