#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/index_score.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/index_score.h"

#include <algorithm>

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void IndexScoresImpl(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys, int64_t n,
                     float* scores) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t t = 0; t < n; ++t) {
    const float* k = keys + t * dim;
    float total = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      const float* qh = q + h * dim;
      auto s0 = hn::Zero(d), s1 = hn::Zero(d);
      int64_t i = 0;
      for (; i + 2 * N <= dim; i += 2 * N) {
        s0 = hn::MulAdd(hn::LoadU(d, qh + i), hn::LoadU(d, k + i), s0);
        s1 = hn::MulAdd(hn::LoadU(d, qh + i + N), hn::LoadU(d, k + i + N), s1);
      }
      for (; i + N <= dim; i += N) s0 = hn::MulAdd(hn::LoadU(d, qh + i), hn::LoadU(d, k + i), s0);
      float dot = hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
      for (; i < dim; ++i) dot += qh[i] * k[i];
      total += std::max(dot, 0.0f) * w[h];
    }
    scores[t] = total;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(IndexScoresImpl);

void index_scores(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys, int64_t n,
                  float* scores) {
  HWY_DYNAMIC_DISPATCH(IndexScoresImpl)(q, w, heads, dim, keys, n, scores);
}

void index_scores_scalar(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys, int64_t n,
                         float* scores) {
  for (int64_t t = 0; t < n; ++t) {
    float total = 0.0f;
    for (int64_t h = 0; h < heads; ++h) {
      float dot = 0.0f;
      for (int64_t i = 0; i < dim; ++i) dot += q[h * dim + i] * keys[t * dim + i];
      total += std::max(dot, 0.0f) * w[h];
    }
    scores[t] = total;
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
