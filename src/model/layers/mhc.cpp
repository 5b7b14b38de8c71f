#include "model/layers/mhc.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::model::layers {
namespace {
template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}
}  // namespace

template <typename T>
void sinkhorn(T* c, int64_t hc, int64_t iters, T eps) {
  for (int64_t j = 0; j < hc; ++j) {
    T* row = c + j * hc;
    const T m = *std::max_element(row, row + hc);
    T sum = 0;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - m);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      T sum = 0;
      for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
      const T den = sum + eps;
      for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= den;
    }
  };
  normalise_columns();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t j = 0; j < hc; ++j) {
      T* row = c + j * hc;
      T sum = 0;
      for (int64_t k = 0; k < hc; ++k) sum += row[k];
      const T den = sum + eps;
      for (int64_t k = 0; k < hc; ++k) row[k] /= den;
    }
    normalise_columns();
  }
}

template <typename T>
void hc_coefficients(const T* m, const float* scale, const float* base, int64_t hc, int64_t iters, T hc_eps, T* pre,
                     T* post, T* comb) {
  for (int64_t j = 0; j < hc; ++j) {
    pre[j] = sigmoid<T>(m[j] * static_cast<T>(scale[0]) + static_cast<T>(base[j])) + hc_eps;
    post[j] = T(2) * sigmoid<T>(m[hc + j] * static_cast<T>(scale[1]) + static_cast<T>(base[hc + j]));
  }
  for (int64_t i = 0; i < hc * hc; ++i) {
    comb[i] = m[2 * hc + i] * static_cast<T>(scale[2]) + static_cast<T>(base[2 * hc + i]);
  }
  sinkhorn<T>(comb, hc, iters, hc_eps);
}

template void sinkhorn<float>(float*, int64_t, int64_t, float);
template void sinkhorn<double>(double*, int64_t, int64_t, double);
template void hc_coefficients<float>(const float*, const float*, const float*, int64_t, int64_t, float, float*, float*,
                                     float*);
template void hc_coefficients<double>(const double*, const float*, const float*, int64_t, int64_t, double, double*,
                                      double*, double*);

}  // namespace dsinfer::model::layers
