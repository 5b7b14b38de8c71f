#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/swiglu.h"

#include <algorithm>
#include <cmath>

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline float SwigluOne(float g, float u, float limit, float weight) {
  if (limit > 0.0f) {
    g = std::min(g, limit);
    u = std::clamp(u, -limit, limit);
  }
  return (g / (1.0f + std::exp(-g))) * u * weight;
}

void SwigluImpl(const float* gate, const float* up, int64_t n, float limit, float weight, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const bool clamp = limit > 0.0f;
  const auto hi = hn::Set(d, limit);
  const auto lo = hn::Set(d, -limit);
  const auto one = hn::Set(d, 1.0f);
  const auto w = hn::Set(d, weight);
  const auto exp_cap = hn::Set(d, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto g = hn::LoadU(d, gate + i);
    auto u = hn::LoadU(d, up + i);
    if (clamp) {
      g = hn::Min(g, hi);
      u = hn::Min(hn::Max(u, lo), hi);
    }
    // exp(88) is near the fp32 limit; beyond it silu(g) is -0 to fp32 precision anyway.
    const auto silu = hn::Div(g, hn::Add(one, hn::Exp(d, hn::Min(hn::Neg(g), exp_cap))));
    hn::StoreU(hn::Mul(hn::Mul(silu, u), w), d, out + i);
  }
  for (; i < n; ++i) out[i] = SwigluOne(gate[i], up[i], limit, weight);
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(SwigluImpl);

void swiglu(const float* gate, const float* up, int64_t n, float limit, float weight, float* out) {
  HWY_DYNAMIC_DISPATCH(SwigluImpl)(gate, up, n, limit, weight, out);
}

void swiglu_scalar(const float* gate, const float* up, int64_t n, float limit, float weight, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    float u = up[i];
    if (limit > 0.0f) {
      g = std::min(g, limit);
      u = std::clamp(u, -limit, limit);
    }
    out[i] = (g / (1.0f + std::exp(-g))) * u * weight;
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
