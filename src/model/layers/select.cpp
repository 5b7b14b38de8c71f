#include "model/layers/select.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dsinfer::model::layers {
namespace {

template <typename T>
T rank_key(T s) {
  return std::isnan(s) ? -std::numeric_limits<T>::infinity() : s;
}

}  // namespace

template <typename T, typename Index>
int64_t select_experts(const T* scores, const float* bias, int64_t E, int64_t K, SelectOrder order, T* biased,
                       Index* chosen) {
  for (int64_t e = 0; e < E; ++e) biased[e] = scores[e] + static_cast<T>(bias[e]);
  const auto before = [&](Index a, Index b) {
    const T ka = rank_key(biased[a]), kb = rank_key(biased[b]);
    return ka > kb || (ka == kb && a < b);
  };
  // One pass with a rank-sorted buffer of the K best so far (K is small: the experts per token).
  const int64_t k = std::min(K, E);
  int64_t have = 0;
  for (int64_t i = 0; i < E && k > 0; ++i) {
    const Index x = static_cast<Index>(i);
    if (have == k && !before(x, chosen[k - 1])) continue;
    int64_t j = have < k ? have++ : k - 1;
    while (j > 0 && before(x, chosen[j - 1])) {
      chosen[j] = chosen[j - 1];
      --j;
    }
    chosen[j] = x;
  }
  if (order == SelectOrder::kByIndex) std::sort(chosen, chosen + k);
  return k;
}

template int64_t select_experts<float, int32_t>(const float*, const float*, int64_t, int64_t, SelectOrder, float*,
                                                int32_t*);
template int64_t select_experts<double, int64_t>(const double*, const float*, int64_t, int64_t, SelectOrder, double*,
                                                 int64_t*);

}  // namespace dsinfer::model::layers
