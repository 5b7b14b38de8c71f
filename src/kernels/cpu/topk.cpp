#include "kernels/cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace dsinfer::kernels {
namespace {
inline float rank_key(float s) { return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s; }

struct Before {
  const float* s;
  bool operator()(int32_t a, int32_t b) const {
    const float ka = rank_key(s[a]);
    const float kb = rank_key(s[b]);
    return ka > kb || (ka == kb && a < b);
  }
};
}  // namespace

int64_t topk_indices(const float* scores, int64_t n, int64_t k, int32_t* out, std::vector<int32_t>& scratch) {
  if (n <= 0 || k <= 0) return 0;
  if (k >= n) {
    std::iota(out, out + n, 0);
    return n;
  }
  if (k <= 16) {
    // Small k (MoE routing): one pass with an insertion-sorted buffer, no scratch.
    int64_t have = 0;
    const Before before{scores};
    for (int32_t i = 0; i < n; ++i) {
      if (have == k && !before(i, out[k - 1])) continue;
      int64_t j = have < k ? have++ : k - 1;
      while (j > 0 && before(i, out[j - 1])) {
        out[j] = out[j - 1];
        --j;
      }
      out[j] = i;
    }
    std::sort(out, out + k);
    return k;
  }
  scratch.resize(n);
  std::iota(scratch.begin(), scratch.end(), 0);
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), Before{scores});
  std::copy(scratch.begin(), scratch.begin() + k, out);
  std::sort(out, out + k);
  return k;
}

int64_t topk_indices_scalar(const float* scores, int64_t n, int64_t k, int32_t* out) {
  if (n <= 0 || k <= 0) return 0;
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), Before{scores});
  const int64_t m = std::min(k, n);
  std::copy(idx.begin(), idx.begin() + m, out);
  std::sort(out, out + m);
  return m;
}

}  // namespace dsinfer::kernels
