// Per-channel softmax pooling of the KV compressor (model-v4.md §2.6): over n candidate tokens,
//   out[c] = Σ_t softmax_t(score_t[c]) · value_t[c].
// Candidates are (value row, score row) pointers so the overlap mode can pass channel-shifted halves.
// A score of −inf drops its candidate. Scalar: it runs once per finished group, not per token.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

// scratch: 2 * dim floats.
void softmax_pool(const float* const* values, const float* const* scores, int64_t n, int64_t dim, float* out,
                  float* scratch);

}  // namespace dsinfer::kernels
