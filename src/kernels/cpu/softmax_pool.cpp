#include "kernels/cpu/softmax_pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::kernels {

void softmax_pool(const float* const* values, const float* const* scores, int64_t n, int64_t dim, float* out,
                  float* scratch) {
  float* m = scratch;
  float* sum = scratch + dim;
  std::fill(m, m + dim, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + dim, 0.0f);
  std::fill(out, out + dim, 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) m[c] = std::max(m[c], scores[t][c]);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) sum[c] += std::exp(scores[t][c] - m[c]);
  // softmax first, then the weighted sum, in the reference's order.
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) out[c] += (std::exp(scores[t][c] - m[c]) / sum[c]) * values[t][c];
}

}  // namespace dsinfer::kernels
