// Number formats of DeepSeek-V4 checkpoints and caches (model-v4.md §4.3): bf16, FP8 E4M3 (fn: no
// infinities, 0x7F/0xFF are NaN), FP4 E2M1 (packed two per byte, low nibble first) and E8M0 scales.
// Decoding is exact in fp32. Encoding rounds to nearest, ties to even, and saturates to the largest
// finite value of the format (FP8 ±448, FP4 ±6), as the reference's clamp-then-cast does.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace dsinfer::core {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kF8E8M0, kFP4E2M1, kI8, kI32, kI64, kU8, kBool };

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- bf16 -----------------------------------------------------------------------------------------
inline float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// ---- FP8 E4M3 (float8_e4m3fn) ---------------------------------------------------------------------
inline float fp8_e4m3_to_float(uint8_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t exp = (code >> 3) & 0xF;
  const uint32_t man = code & 0x7;
  if (exp == 0xF && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float mag;
  if (exp == 0) {
    mag = static_cast<float>(man) * 0.001953125f;  // m/8 * 2^-6 = m * 2^-9
  } else {
    mag = bits_float(((exp + 120u) << 23) | (man << 20));  // rebias 7 -> 127
  }
  return bits_float(float_bits(mag) | sign);
}

inline uint8_t float_to_fp8_e4m3(float f) {
  const uint32_t u = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint8_t>(sign | 0x7F);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7E);  // saturate (also +-inf)
  if (a < 0.015625f) {  // below 2^-6: subnormal grid of step 2^-9, round half to even
    const float q = std::nearbyint(a * 512.0f);  // default FE_TONEAREST
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));  // q == 8 becomes the smallest normal
  }
  // Normal: keep 3 mantissa bits of the fp32 value with round-to-nearest-even.
  uint32_t au = float_bits(a);
  au += 0x7FFFFu + ((au >> 20) & 1u);
  const uint32_t exp = (au >> 23) - 120u;
  const uint32_t man = (au >> 20) & 0x7u;
  if (exp > 15 || (exp == 15 && man == 7)) return static_cast<uint8_t>(sign | 0x7E);
  return static_cast<uint8_t>(sign | (exp << 3) | man);
}

// ---- FP4 E2M1 -------------------------------------------------------------------------------------
inline constexpr float kFp4Values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

inline float fp4_e2m1_to_float(uint8_t nibble) { return kFp4Values[nibble & 0xF]; }

inline uint8_t float_to_fp4_e2m1(float f) {
  const uint8_t sign = std::signbit(f) ? 0x8 : 0x0;
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7;  // no NaN in E2M1: saturate
  // Count the midpoints between neighbouring codes that a passes; at a tie the even code (even
  // mantissa bit) wins, hence > before an odd code and >= before an even one. Branch-free: random
  // weights make a compare chain mispredict on every element.
  const uint8_t code = static_cast<uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) +
                                            (a > 2.5f) + (a >= 3.5f) + (a > 5.0f));
  return sign | code;
}

// Packed FP4: byte holds logical element 2c in the low nibble and 2c+1 in the high nibble.
inline float fp4_packed_get(const uint8_t* packed, int64_t index) {
  const uint8_t b = packed[index >> 1];
  return fp4_e2m1_to_float((index & 1) ? (b >> 4) : (b & 0xF));
}

// ---- E8M0 (float8_e8m0fnu) ------------------------------------------------------------------------
inline float e8m0_to_float(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  if (code == 0) return bits_float(0x00400000u);  // 2^-127 is an fp32 subnormal
  return bits_float(static_cast<uint32_t>(code) << 23);
}

// The power-of-two scale of a QDQ block, 2^ceil(log2(amax / qmax)), as the reference derives it from
// the IEEE bits of the fp32 product amax * (1 / qmax): its exponent, plus one when the mantissa is
// non-zero. amax is floored at `amax_floor` first. Returns the E8M0 code.
inline uint8_t e8m0_scale_code(float amax, float qmax, float amax_floor) {
  if (!(amax >= amax_floor)) amax = amax_floor;
  const uint32_t u = float_bits(amax * (1.0f / qmax));
  uint32_t exp = (u >> 23) & 0xFF;
  if ((u & 0x7FFFFFu) != 0) exp += 1;
  if (exp > 254) exp = 254;
  return static_cast<uint8_t>(exp);
}

inline constexpr float kFp8Max = 448.0f;
inline constexpr float kFp8AmaxFloor = 1e-4f;
inline constexpr float kFp4Max = 6.0f;
inline constexpr float kFp4AmaxFloor = 6.0f * 1.1754943508222875e-38f;  // 6 * 2^-126

}  // namespace dsinfer::core
