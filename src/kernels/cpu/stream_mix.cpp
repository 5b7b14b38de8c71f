#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/stream_mix.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/stream_mix.h"

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void HcCombineImpl(const float* x, const float* w, int64_t hc, int64_t d, float* y) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = 0;
  for (; c + N <= d; c += N) {
    auto acc = hn::Mul(hn::Set(df, w[0]), hn::LoadU(df, x + c));
    for (int64_t j = 1; j < hc; ++j) acc = hn::MulAdd(hn::Set(df, w[j]), hn::LoadU(df, x + j * d + c), acc);
    hn::StoreU(acc, df, y + c);
  }
  for (; c < d; ++c) {
    float acc = w[0] * x[c];
    for (int64_t j = 1; j < hc; ++j) acc += w[j] * x[j * d + c];
    y[c] = acc;
  }
}

void HcExpandImpl(const float* f, const float* x, const float* post, const float* comb, int64_t hc, int64_t d,
                  float* out) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t k = 0; k < hc; ++k) {
    float* ok = out + k * d;
    int64_t c = 0;
    for (; c + N <= d; c += N) {
      auto mix = hn::Mul(hn::Set(df, comb[k]), hn::LoadU(df, x + c));
      for (int64_t j = 1; j < hc; ++j)
        mix = hn::MulAdd(hn::Set(df, comb[j * hc + k]), hn::LoadU(df, x + j * d + c), mix);
      hn::StoreU(hn::MulAdd(hn::Set(df, post[k]), hn::LoadU(df, f + c), mix), df, ok + c);
    }
    for (; c < d; ++c) {
      float mix = comb[k] * x[c];
      for (int64_t j = 1; j < hc; ++j) mix += comb[j * hc + k] * x[j * d + c];
      ok[c] = post[k] * f[c] + mix;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(HcCombineImpl);
HWY_EXPORT(HcExpandImpl);

void hc_combine(const float* x, const float* w, int64_t hc, int64_t d, float* y) {
  HWY_DYNAMIC_DISPATCH(HcCombineImpl)(x, w, hc, d, y);
}
void hc_expand(const float* f, const float* x, const float* post, const float* comb, int64_t hc, int64_t d,
               float* out) {
  HWY_DYNAMIC_DISPATCH(HcExpandImpl)(f, x, post, comb, hc, d, out);
}

void hc_combine_scalar(const float* x, const float* w, int64_t hc, int64_t d, float* y) {
  for (int64_t c = 0; c < d; ++c) {
    float acc = w[0] * x[c];
    for (int64_t j = 1; j < hc; ++j) acc += w[j] * x[j * d + c];
    y[c] = acc;
  }
}
void hc_expand_scalar(const float* f, const float* x, const float* post, const float* comb, int64_t hc, int64_t d,
                      float* out) {
  for (int64_t k = 0; k < hc; ++k) {
    for (int64_t c = 0; c < d; ++c) {
      float mix = comb[k] * x[c];
      for (int64_t j = 1; j < hc; ++j) mix += comb[j * hc + k] * x[j * d + c];
      out[k * d + c] = post[k] * f[c] + mix;
    }
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
