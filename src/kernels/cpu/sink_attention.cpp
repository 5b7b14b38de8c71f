#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/sink_attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/sink_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dtypes.h"

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float Dot(const float* a, const float* b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void SinkAttentionImpl(const SinkAttention& a) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = a.n, dim = a.dim, H = a.heads;
  float* s = a.scratch;        // [H][n] logits, then exp(l − M)
  float* den = a.scratch + H * n;  // [H]
  for (int64_t j = 0; j < n; ++j) {
    const float* row = a.rows[j];
    for (int64_t h = 0; h < H; ++h) s[h * n + j] = Dot(a.q + h * dim, row, dim) * a.scale;
  }
  // Flooring the exponent keeps Highway's Exp inside its valid range; exp(-87) is ~0 next to exp(0).
  const auto exp_floor = hn::Set(d, -87.0f);
  for (int64_t h = 0; h < H; ++h) {
    float* sh = s + h * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sh[j]);
    const auto vm = hn::Set(d, m);
    auto acc = hn::Zero(d);
    int64_t j = 0;
    for (; j + N <= n; j += N) {
      auto e = hn::Exp(d, hn::Max(hn::Sub(hn::LoadU(d, sh + j), vm), exp_floor));
      if (a.bf16_probs) {  // round to nearest even at bit 16 (values finite, non-negative)
        auto u = hn::BitCast(du, e);
        const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
        u = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), lsb)), hn::Set(du, 0xFFFF0000u));
        e = hn::BitCast(d, u);
      }
      hn::StoreU(e, d, sh + j);
      acc = hn::Add(acc, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; j < n; ++j) {
      float e = std::exp(std::max(sh[j] - m, -87.0f));
      if (a.bf16_probs) e = core::round_to_bf16(e);
      sh[j] = e;
      sum += e;
    }
    den[h] = sum + std::exp(a.sink[h] - m);
  }
  std::fill(a.out, a.out + H * dim, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = a.rows[j];
    for (int64_t h = 0; h < H; ++h) {
      const float p = s[h * n + j];
      const auto vp = hn::Set(d, p);
      float* oh = a.out + h * dim;
      int64_t i = 0;
      for (; i + N <= dim; i += N) hn::StoreU(hn::MulAdd(vp, hn::LoadU(d, row + i), hn::LoadU(d, oh + i)), d, oh + i);
      for (; i < dim; ++i) oh[i] += p * row[i];
    }
  }
  for (int64_t h = 0; h < H; ++h) {
    const auto vden = hn::Set(d, den[h]);
    float* oh = a.out + h * dim;
    int64_t i = 0;
    for (; i + N <= dim; i += N) hn::StoreU(hn::Div(hn::LoadU(d, oh + i), vden), d, oh + i);
    for (; i < dim; ++i) oh[i] /= den[h];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(SinkAttentionImpl);

void sink_attention(const SinkAttention& a) {
  if (a.n <= 0) {
    std::fill(a.out, a.out + a.heads * a.dim, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(SinkAttentionImpl)(a);
}

void sink_attention_scalar(const SinkAttention& a) {
  const int64_t n = a.n, dim = a.dim;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* qh = a.q + h * dim;
    float* oh = a.out + h * dim;
    std::fill(oh, oh + dim, 0.0f);
    if (n <= 0) continue;
    float* l = a.scratch;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t i = 0; i < dim; ++i) acc += qh[i] * a.rows[j][i];
      l[j] = acc * a.scale;
      m = std::max(m, l[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      float e = std::exp(l[j] - m);
      if (a.bf16_probs) e = core::round_to_bf16(e);
      sum += e;
      for (int64_t i = 0; i < dim; ++i) oh[i] += e * a.rows[j][i];
    }
    const float den = sum + std::exp(a.sink[h] - m);
    for (int64_t i = 0; i < dim; ++i) oh[i] /= den;
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
