// The two stream operations of mHC (model-v4.md §2.3.2) on one token with hc streams of d channels
// stored stream-major (x[j*d + c]):
//   combine: y[c] = Σ_j w[j] · x[j][c]                                (pre-mix into the sub-layer input)
//   expand:  out[k][c] = post[k] · f[c] + Σ_j comb[j][k] · x[j][c]    (comb contracted over its FIRST index)
// j is summed in ascending order. `out` must not alias `x`.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

void hc_combine(const float* x, const float* w, int64_t hc, int64_t d, float* y);
void hc_expand(const float* f, const float* x, const float* post, const float* comb, int64_t hc, int64_t d,
               float* out);

void hc_combine_scalar(const float* x, const float* w, int64_t hc, int64_t d, float* y);
void hc_expand_scalar(const float* f, const float* x, const float* post, const float* comb, int64_t hc, int64_t d,
                      float* out);

}  // namespace dsinfer::kernels
