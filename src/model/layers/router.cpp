#include "model/layers/router.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::model::layers {

template <typename T>
T sqrt_softplus(T x) {
  return std::sqrt(std::max(x, T(0)) + std::log1p(std::exp(-std::fabs(x))));
}

template <typename T>
void router_scores(T* s, int64_t E, const RouterSpec& spec) {
  const T temp = static_cast<T>(spec.gate_temp);
  for (int64_t e = 0; e < E; ++e) s[e] = sqrt_softplus<T>(spec.gate_temp == 1.0 ? s[e] : s[e] / temp);
}

template <typename T, typename Index>
void route_weights(const T* scores, const Index* chosen, int64_t K, const RouterSpec& spec, T* w) {
  const T scale = static_cast<T>(spec.route_scale);
  if (!spec.normalize) {
    for (int64_t k = 0; k < K; ++k) w[k] = scores[chosen[k]] * scale;
    return;
  }
  T sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += scores[chosen[k]];
  const T den = sum + static_cast<T>(spec.sum_eps);
  for (int64_t k = 0; k < K; ++k) w[k] = scores[chosen[k]] / den * scale;
}

template float sqrt_softplus<float>(float);
template double sqrt_softplus<double>(double);
template void router_scores<float>(float*, int64_t, const RouterSpec&);
template void router_scores<double>(double*, int64_t, const RouterSpec&);
template void route_weights<float, int32_t>(const float*, const int32_t*, int64_t, const RouterSpec&, float*);
template void route_weights<double, int64_t>(const double*, const int64_t*, int64_t, const RouterSpec&, double*);

}  // namespace dsinfer::model::layers
