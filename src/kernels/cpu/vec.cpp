#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/vec.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/vec.h"

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

float DotImpl(const float* a, const float* b, int64_t n) {
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

float SumSquaresImpl(const float* x, int64_t n) { return DotImpl(x, x, n); }

void AxpyImpl(float a, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::MulAdd(va, hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

void ScaleImpl(float a, const float* x, float* y, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto va = hn::Set(d, a);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(va, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] = a * x[i];
}

// A vector compare against the best so far skips every block with nothing larger; a block that has a
// larger value is rescanned in order, so the result is the scalar loop's.
int64_t ArgmaxFirstImpl(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t best = 0;
  int64_t i = 1;
  for (; i + N <= n; i += N) {
    if (hn::AllFalse(d, hn::Gt(hn::LoadU(d, x + i), hn::Set(d, x[best])))) continue;
    for (int64_t k = i; k < i + N; ++k)
      if (x[k] > x[best]) best = k;
  }
  for (; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(DotImpl);
HWY_EXPORT(SumSquaresImpl);
HWY_EXPORT(AxpyImpl);
HWY_EXPORT(ScaleImpl);
HWY_EXPORT(ArgmaxFirstImpl);

float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(DotImpl)(a, b, n); }
float sum_squares(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumSquaresImpl)(x, n); }
void axpy(float a, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(AxpyImpl)(a, x, y, n); }
void scale(float a, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(ScaleImpl)(a, x, y, n); }
int64_t argmax_first(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(ArgmaxFirstImpl)(x, n); }

float dot_scalar(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
float sum_squares_scalar(const float* x, int64_t n) { return dot_scalar(x, x, n); }
void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
void scale_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i];
}
int64_t argmax_first_scalar(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
