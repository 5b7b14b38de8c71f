#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/qdq.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/qdq.h"

#include <cmath>

#include "core/dtypes.h"

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// E4M3 → fp32 without a table: the 7 magnitude bits placed at fp32 bits 20..26 form a number whose
// exponent is biased by 127 instead of 7 (subnormals included, since an fp32 subnormal scaled by an
// exact power of two stays exact), so one multiply by 2^120 rebiases it. NaN codes are never stored.
// kBf16: y is uint16_t, each value's high half (see fp8_block_decode_bf16).
template <bool kBf16>
void Fp8DecodeAs(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, void* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint8_t, decltype(df)> d8;
  const hn::Rebind<uint16_t, decltype(df)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto rebias = hn::Set(df, 1.329227995784916e36f);  // 2^120
  const auto mag_mask = hn::Set(du, 0x7Fu);
  const auto sign_mask = hn::Set(du, 0x80u);
  float* y = static_cast<float*>(out);
  uint16_t* yh = static_cast<uint16_t*>(out);
  for (int64_t b = 0; b < n; b += block) {
    const auto vs = hn::Set(df, core::e8m0_to_float(scales[b / block]));
    int64_t i = b;
    const int64_t end = b + block;
    for (; i + N <= end; i += N) {
      const auto c = hn::PromoteTo(du, hn::LoadU(d8, codes + i));
      const auto mag = hn::BitCast(df, hn::ShiftLeft<20>(hn::And(c, mag_mask)));
      const auto sign = hn::ShiftLeft<24>(hn::And(c, sign_mask));
      const auto v = hn::Or(hn::Mul(hn::Mul(mag, rebias), vs), hn::BitCast(df, sign));
      if constexpr (kBf16) {
        hn::StoreU(hn::TruncateTo(d16, hn::ShiftRight<16>(hn::BitCast(du, v))), d16, yh + i);
      } else {
        hn::StoreU(v, df, y + i);
      }
    }
    const float s = core::e8m0_to_float(scales[b / block]);
    for (; i < end; ++i) {
      const float v = core::fp8_e4m3_to_float(codes[i]) * s;
      if constexpr (kBf16) {
        yh[i] = static_cast<uint16_t>(core::float_bits(v) >> 16);
      } else {
        y[i] = v;
      }
    }
  }
}

void Fp8DecodeImpl(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* y) {
  Fp8DecodeAs<false>(codes, scales, n, block, y);
}

void Fp8DecodeBf16Impl(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, uint16_t* y) {
  Fp8DecodeAs<true>(codes, scales, n, block, y);
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(Fp8DecodeImpl);
HWY_EXPORT(Fp8DecodeBf16Impl);

namespace {
float block_amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(x[i]));
  return m;
}
}  // namespace

void fp8_block_encode(const float* x, int64_t n, int64_t block, uint8_t* codes, uint8_t* scales) {
  for (int64_t b = 0; b < n; b += block) {
    const uint8_t code = core::e8m0_scale_code(block_amax(x + b, block), core::kFp8Max, core::kFp8AmaxFloor);
    scales[b / block] = code;
    // Multiplying by the exact inverse power of two rounds like the reference's division.
    const float inv = 1.0f / core::e8m0_to_float(code);
    for (int64_t i = b; i < b + block; ++i) codes[i] = core::float_to_fp8_e4m3(x[i] * inv);
  }
}

void fp8_block_decode(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* y) {
  HWY_DYNAMIC_DISPATCH(Fp8DecodeImpl)(codes, scales, n, block, y);
}

void fp8_block_decode_bf16(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, uint16_t* y) {
  HWY_DYNAMIC_DISPATCH(Fp8DecodeBf16Impl)(codes, scales, n, block, y);
}

void fp8_block_decode_scalar(const uint8_t* codes, const uint8_t* scales, int64_t n, int64_t block, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = core::fp8_e4m3_to_float(codes[i]) * core::e8m0_to_float(scales[i / block]);
}

void fp4_block_encode(const float* x, int64_t n, int64_t block, uint8_t* packed, uint8_t* scales) {
  for (int64_t b = 0; b < n; b += block) {
    const uint8_t code = core::e8m0_scale_code(block_amax(x + b, block), core::kFp4Max, core::kFp4AmaxFloor);
    scales[b / block] = code;
    const float inv = 1.0f / core::e8m0_to_float(code);
    for (int64_t i = b; i < b + block; i += 2) {
      const uint8_t lo = core::float_to_fp4_e2m1(x[i] * inv);
      const uint8_t hi = core::float_to_fp4_e2m1(x[i + 1] * inv);
      packed[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void fp4_decode_scaled(const uint8_t* packed, int64_t n, float s, float* y) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint8_t byte = packed[i / 2];
    y[i] = core::fp4_e2m1_to_float(byte & 0xF) * s;
    y[i + 1] = core::fp4_e2m1_to_float(byte >> 4) * s;
  }
}

void fp4_block_decode(const uint8_t* packed, const uint8_t* scales, int64_t n, int64_t block, float* y) {
  for (int64_t b = 0; b < n; b += block) {
    fp4_decode_scaled(packed + b / 2, block, core::e8m0_to_float(scales[b / block]), y + b);
  }
}

void fp8_block_qdq(float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b < n; b += block) {
    const uint8_t code = core::e8m0_scale_code(block_amax(x + b, block), core::kFp8Max, core::kFp8AmaxFloor);
    const float s = core::e8m0_to_float(code);
    const float inv = 1.0f / s;
    for (int64_t i = b; i < b + block; ++i) x[i] = core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(x[i] * inv)) * s;
  }
}

void fp4_block_qdq(float* x, int64_t n, int64_t block) {
  for (int64_t b = 0; b < n; b += block) {
    const uint8_t code = core::e8m0_scale_code(block_amax(x + b, block), core::kFp4Max, core::kFp4AmaxFloor);
    const float s = core::e8m0_to_float(code);
    const float inv = 1.0f / s;
    for (int64_t i = b; i < b + block; ++i) x[i] = core::fp4_e2m1_to_float(core::float_to_fp4_e2m1(x[i] * inv)) * s;
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
