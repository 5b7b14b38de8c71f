#include "model/layers/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::model::layers {

template <typename T>
void softmax_pool(const float* const* values, const float* const* scores, int64_t n, int64_t dim, PoolOrder order,
                  float* out, T* scratch) {
  T* m = scratch;
  T* sum = scratch + dim;
  T* acc = scratch + 2 * dim;
  T* e = scratch + 3 * dim;  // [n][dim]
  std::fill(m, m + dim, -std::numeric_limits<T>::infinity());
  std::fill(sum, sum + dim, T(0));
  std::fill(acc, acc + dim, T(0));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) m[c] = std::max(m[c], static_cast<T>(scores[t][c]));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) {
      e[t * dim + c] = std::exp(static_cast<T>(scores[t][c]) - m[c]);
      sum[c] += e[t * dim + c];
    }
  if (order == PoolOrder::kSoftmaxFirst) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < dim; ++c) acc[c] += (e[t * dim + c] / sum[c]) * static_cast<T>(values[t][c]);
    for (int64_t c = 0; c < dim; ++c) out[c] = static_cast<float>(acc[c]);
  } else {
    // The numerator starts from its first term, not from 0 (0 + −0 would be +0), as the reference's
    // e0·v0 + e1·v1 does.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < dim; ++c) {
        const T term = e[t * dim + c] * static_cast<T>(values[t][c]);
        acc[c] = t == 0 ? term : acc[c] + term;
      }
    for (int64_t c = 0; c < dim; ++c) out[c] = static_cast<float>(acc[c] / sum[c]);
  }
}

template void softmax_pool<float>(const float* const*, const float* const*, int64_t, int64_t, PoolOrder, float*,
                                  float*);
template void softmax_pool<double>(const float* const*, const float* const*, int64_t, int64_t, PoolOrder, float*,
                                   double*);

}  // namespace dsinfer::model::layers
