// The KV compressor's per-channel softmax pooling (model-v4.md §2.6, model-v41.md §2.6), shared by V4
// and V4.1: over n candidate tokens,
//   out[c] = Σ_t softmax_t(score_t[c]) · value_t[c].
// Candidates are (value row, score row) pointers so V4's overlap mode can pass channel-shifted
// halves; a score of −inf drops its candidate. The two references round in different orders, kept
// as data (PoolOrder); T is the scalar of the model's glue (float in V4, double in V4.1). The
// candidate layout, the norm, RoPE and quantisation of the entry stay with each model. Scalar (std::exp,
// as the references' exponentials): it runs once per finished group, not per token.
#pragma once

#include <cstdint>

namespace dsinfer::model::layers {

enum class PoolOrder {
  kSoftmaxFirst,  // V4: Σ_t (e_t / Σ e) · v_t, accumulated from 0 in t order
  kDivideLast,    // V4.1: (Σ_t e_t · v_t) / Σ e, the numerator from the first term in t order
};
// with e_t = exp(score_t − max_t score_t) and Σ e in t order, all in T.

// T values of scratch softmax_pool needs: per channel the max, the sum, the accumulator and the n
// exponentials (each computed once).
inline int64_t softmax_pool_scratch(int64_t n, int64_t dim) { return (3 + n) * dim; }

template <typename T>
void softmax_pool(const float* const* values, const float* const* scores, int64_t n, int64_t dim, PoolOrder order,
                  float* out, T* scratch);

}  // namespace dsinfer::model::layers
