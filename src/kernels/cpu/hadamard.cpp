#include "kernels/cpu/hadamard.h"

#include <cmath>

#include "core/error.h"

namespace dsinfer::kernels {

void hadamard_transform(float* x, int64_t n) {
  DSINFER_CHECK(n > 0 && (n & (n - 1)) == 0, "Hadamard size must be a power of two, got ", n);
  for (int64_t h = 1; h < n; h *= 2) {
    for (int64_t i = 0; i < n; i += 2 * h) {
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j];
        const float b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float s = static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace dsinfer::kernels
