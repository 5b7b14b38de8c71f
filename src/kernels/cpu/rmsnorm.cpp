#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "kernels/cpu/vec.h"

namespace dsinfer::kernels {
namespace {
float inv_from_sum(float sum_sq, int64_t n, float eps) {
  return 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
}
}  // namespace

// The SIMD work is the sum of squares and the scaling; both come from vec.cpp's dispatched kernels.
float rms_inv(const float* x, int64_t n, float eps) { return inv_from_sum(sum_squares(x, n), n, eps); }

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float inv = rms_inv(x, n, eps);
  scale(inv, x, y, n);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] *= w[i];
  }
}

float rms_inv_scalar(const float* x, int64_t n, float eps) { return inv_from_sum(sum_squares_scalar(x, n), n, eps); }

void rmsnorm_scalar(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float inv = rms_inv_scalar(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w != nullptr ? (x[i] * inv) * w[i] : x[i] * inv;
}

}  // namespace dsinfer::kernels
