// Exhaustive checks of the number formats in core/dtypes.h. Expected values are computed here from the
// format definitions (sign / exponent / mantissa fields, model-v4.md §4.3), never from the code under test.
#include "core/dtypes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace dsinfer::core {
namespace {

// ---- independent definitions ---------------------------------------------------------------------

// float8_e4m3fn: 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities, S.1111.111 = NaN.
double e4m3_definition(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 0xF && m == 0x7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = (e == 0) ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// E2M1: 1 sign, 2 exponent bits (bias 1), 1 mantissa bit, exponent 0 is subnormal (m/2).
double e2m1_definition(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 0x3, m = code & 0x1;
  const double mag = (e == 0) ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -mag : mag;
}

// bf16: the upper 16 bits of an IEEE binary32, 1 sign, 8 exponent bits (bias 127), 7 mantissa bits.
double bf16_definition(int code) {
  const int s = (code >> 15) & 1, e = (code >> 7) & 0xFF, m = code & 0x7F;
  double mag;
  if (e == 0xFF) {
    if (m != 0) return std::numeric_limits<double>::quiet_NaN();
    mag = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    mag = std::ldexp(m / 128.0, -126);
  } else {
    mag = std::ldexp(1.0 + m / 128.0, e - 127);
  }
  return s ? -mag : mag;
}

// E8M0: unsigned, value 2^(code - 127), 0xFF = NaN.
double e8m0_definition(int code) {
  if (code == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, code - 127);
}

// Same value or both NaN; distinguishes +0 from -0.
void expect_same_value(double expected, float actual, const std::string& what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << ": expected NaN, got " << actual;
    return;
  }
  EXPECT_EQ(expected, static_cast<double>(actual)) << what;
  EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << what << " (sign of zero)";
}

// Round-to-nearest-even onto a finite code set by brute force: the code whose value is closest to x;
// on an exact tie the code with an even mantissa (lowest bit 0). `codes` are the non-negative codes.
int nearest_code(double x, const std::vector<int>& codes, double (*value)(int)) {
  int best = -1;
  double best_diff = 0;
  for (int c : codes) {
    const double diff = std::fabs(value(c) - x);
    if (best < 0 || diff < best_diff || (diff == best_diff && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_diff = diff;
    }
  }
  return best;
}

std::vector<int> finite_positive_e4m3_codes() {
  std::vector<int> codes;
  for (int c = 0; c <= 0x7E; ++c) codes.push_back(c);  // 0x7F is NaN; values ascend with the code
  return codes;
}

// ---- FP8 E4M3 --------------------------------------------------------------------------------------

TEST(DTypesFp8, EveryCodeDecodesToTheFormatDefinition) {
  for (int c = 0; c < 256; ++c) {
    expect_same_value(e4m3_definition(c), fp8_e4m3_to_float(static_cast<uint8_t>(c)), "code " + std::to_string(c));
  }
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(fp8_e4m3_to_float(0x08), std::ldexp(1.0f, -6));
}

TEST(DTypesFp8, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(float_to_fp8_e4m3(fp8_e4m3_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(DTypesFp8, MidpointsRoundToTheEvenCode) {
  for (int c = 0; c < 0x7E; ++c) {
    const double lo = e4m3_definition(c), hi = e4m3_definition(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2) << "midpoint must be exact in fp32";
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(float_to_fp8_e4m3(mid), even) << "midpoint of codes " << c << "," << c + 1;
    EXPECT_EQ(float_to_fp8_e4m3(-mid), even | 0x80) << "negative midpoint of codes " << c << "," << c + 1;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 0.0f)), c) << "just below midpoint " << c;
    EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(mid, 1e9f)), c + 1) << "just above midpoint " << c;
    EXPECT_EQ(float_to_fp8_e4m3(-std::nextafter(mid, 1e9f)), (c + 1) | 0x80) << "negative, above midpoint " << c;
  }
}

TEST(DTypesFp8, RandomValuesRoundToNearestEven) {
  const auto codes = finite_positive_e4m3_codes();
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> exponent(-12.0, 9.5);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(std::exp2(exponent(rng)));
    if (x >= 448.0f) continue;  // saturation is checked separately
    const int expected = nearest_code(x, codes, e4m3_definition);
    ASSERT_EQ(float_to_fp8_e4m3(x), expected) << "x = " << x;
    ASSERT_EQ(float_to_fp8_e4m3(-x), expected | 0x80) << "x = " << -x;
  }
}

TEST(DTypesFp8, SaturatesToMaxFinite) {
  for (float x : {448.0f, 449.0f, 464.0f, 479.0f, 480.0f, 1e6f, 3e38f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp8_e4m3(x), 0x7E) << x;
    EXPECT_EQ(float_to_fp8_e4m3(-x), 0xFE) << -x;
  }
}

TEST(DTypesFp8, TinyValuesAndZeros) {
  const float smallest = std::ldexp(1.0f, -9);
  EXPECT_EQ(float_to_fp8_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_fp8_e4m3(smallest / 2), 0x00);  // tie between 0 and code 1: even is 0
  EXPECT_EQ(float_to_fp8_e4m3(std::nextafter(smallest / 2, 1.0f)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3(-1e-30f), 0x80);
}

TEST(DTypesFp8, NanEncodesToNan) {
  const float nans[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                        bits_float(0x7F800001u), bits_float(0xFFC00000u), bits_float(0x7FFFFFFFu)};
  for (float n : nans) {
    const uint8_t c = float_to_fp8_e4m3(n);
    EXPECT_EQ(c & 0x7F, 0x7F) << "NaN bits " << float_bits(n);
    EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(c)));
  }
}

// ---- FP4 E2M1 --------------------------------------------------------------------------------------

TEST(DTypesFp4, AllSixteenCodesDecodeToTheFormatDefinition) {
  for (int c = 0; c < 16; ++c) {
    expect_same_value(e2m1_definition(c), fp4_e2m1_to_float(static_cast<uint8_t>(c)), "nibble " + std::to_string(c));
    expect_same_value(e2m1_definition(c), kFp4Values[c], "table entry " + std::to_string(c));
    // Only the low nibble counts.
    expect_same_value(e2m1_definition(c), fp4_e2m1_to_float(static_cast<uint8_t>(c | 0xA0)), "high bits set");
  }
}

TEST(DTypesFp4, EncodeOfDecodeIsIdentity) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(float_to_fp4_e2m1(fp4_e2m1_to_float(static_cast<uint8_t>(c))), c) << c;
}

TEST(DTypesFp4, MidpointsRoundToTheEvenCode) {
  for (int c = 0; c < 7; ++c) {
    const double lo = e2m1_definition(c), hi = e2m1_definition(c + 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(float_to_fp4_e2m1(mid), even) << "midpoint " << mid;
    EXPECT_EQ(float_to_fp4_e2m1(-mid), even | 0x8) << "midpoint " << -mid;
    EXPECT_EQ(float_to_fp4_e2m1(std::nextafter(mid, 0.0f)), c) << "below " << mid;
    EXPECT_EQ(float_to_fp4_e2m1(std::nextafter(mid, 100.0f)), c + 1) << "above " << mid;
    EXPECT_EQ(float_to_fp4_e2m1(-std::nextafter(mid, 100.0f)), (c + 1) | 0x8) << "above " << -mid;
  }
}

TEST(DTypesFp4, RandomValuesRoundToNearestEven) {
  std::vector<int> codes = {0, 1, 2, 3, 4, 5, 6, 7};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(0.0f, 6.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = dist(rng);
    const int expected = nearest_code(x, codes, e2m1_definition);
    ASSERT_EQ(float_to_fp4_e2m1(x), expected) << x;
    ASSERT_EQ(float_to_fp4_e2m1(-x), expected | 0x8) << -x;
  }
}

TEST(DTypesFp4, SaturatesAndHandlesZeroAndNan) {
  for (float x : {6.0f, 6.5f, 7.0f, 100.0f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_fp4_e2m1(x), 0x7) << x;
    EXPECT_EQ(float_to_fp4_e2m1(-x), 0xF) << -x;
  }
  EXPECT_EQ(float_to_fp4_e2m1(0.0f), 0x0);
  EXPECT_EQ(float_to_fp4_e2m1(-0.0f), 0x8);
  // E2M1 has no NaN code; a NaN saturates (documented choice in dtypes.h), never a random code.
  EXPECT_EQ(float_to_fp4_e2m1(std::numeric_limits<float>::quiet_NaN()) & 0x7, 0x7);
}

TEST(DTypesFp4, PackedLowNibbleFirst) {
  const uint8_t packed[2] = {0x21, 0xF7};  // elements: 1 (0.5), 2 (1.0), 7 (6.0), F (-6.0)
  EXPECT_EQ(fp4_packed_get(packed, 0), 0.5f);
  EXPECT_EQ(fp4_packed_get(packed, 1), 1.0f);
  EXPECT_EQ(fp4_packed_get(packed, 2), 6.0f);
  EXPECT_EQ(fp4_packed_get(packed, 3), -6.0f);
}

// ---- bf16 ------------------------------------------------------------------------------------------

TEST(DTypesBf16, EveryCodeDecodesToTheFormatDefinition) {
  for (int c = 0; c < 65536; ++c) {
    const double expected = bf16_definition(c);
    const float actual = bf16_to_float(static_cast<uint16_t>(c));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(actual)) << c;
    } else {
      ASSERT_EQ(expected, static_cast<double>(actual)) << c;
      ASSERT_EQ(std::signbit(expected), std::signbit(actual)) << c;
    }
  }
}

TEST(DTypesBf16, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  for (int c = 0; c < 65536; ++c) {
    if (std::isnan(bf16_definition(c))) continue;
    ASSERT_EQ(float_to_bf16(bf16_to_float(static_cast<uint16_t>(c))), c) << c;
  }
}

TEST(DTypesBf16, MidpointsRoundToEvenAndNeighboursToNearest) {
  // Between finite codes c and c+1 of the same sign (the fp32 values whose upper half is c).
  for (int c = 0; c < 65536; ++c) {
    const double lo = bf16_definition(c);
    if (std::isnan(lo) || std::isinf(lo) || (c & 0x7FFF) == 0x7F7F) continue;  // no finite upper neighbour
    const double hi = bf16_definition(c + 1);
    const double mid_d = (lo + hi) / 2;
    const float mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d);
    const int even = (c & 1) == 0 ? c : c + 1;
    ASSERT_EQ(float_to_bf16(mid), even) << "midpoint of " << c;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, static_cast<float>(lo))), c) << "below midpoint of " << c;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, static_cast<float>(hi))), c + 1) << "above midpoint of " << c;
  }
}

TEST(DTypesBf16, OverflowGoesToInfinityAsIeeeRneDoes) {
  const float max_bf16 = static_cast<float>(bf16_definition(0x7F7F));
  const float half_ulp_above = static_cast<float>(bf16_definition(0x7F7F) + std::ldexp(1.0, 127 - 8));
  EXPECT_EQ(float_to_bf16(max_bf16), 0x7F7F);
  EXPECT_EQ(float_to_bf16(std::nextafter(half_ulp_above, 0.0f)), 0x7F7F);
  EXPECT_EQ(float_to_bf16(half_ulp_above), 0x7F80);  // tie: the even neighbour is +inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
}

TEST(DTypesBf16, NanStaysNan) {
  // Including payloads whose upper half alone would read as infinity.
  for (uint32_t bits : {0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    const uint16_t b = float_to_bf16(bits_float(bits));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << std::hex << bits;
    EXPECT_EQ(b >> 15, bits >> 31) << "sign kept for " << std::hex << bits;
  }
}

TEST(DTypesBf16, RoundToBf16MatchesDefinition) {
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 100000; ++i) {
    const float x = bits_float(bits(rng));
    if (std::isnan(x) || std::isinf(x) || std::fabs(x) > 3.3e38f) continue;
    // Nearest bf16 by brute force among the two candidates bracketing x (truncation and next up).
    const int t = static_cast<int>(float_bits(x) >> 16);
    const double a = bf16_definition(t), b = bf16_definition(t + 1);
    const double da = std::fabs(a - x), db = std::fabs(b - x);
    const int expected = (da < db || (da == db && (t & 1) == 0)) ? t : t + 1;
    ASSERT_EQ(float_to_bf16(x), expected) << std::hex << float_bits(x);
    ASSERT_EQ(round_to_bf16(x), static_cast<float>(bf16_definition(expected)));
  }
}

// ---- E8M0 ------------------------------------------------------------------------------------------

TEST(DTypesE8m0, All256Codes) {
  for (int c = 0; c < 256; ++c) {
    const double expected = e8m0_definition(c);
    const float actual = e8m0_to_float(static_cast<uint8_t>(c));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(actual), expected) << c;
    }
  }
}

// The reference's scale: amax floored, p = fp32(amax · fp32(1/qmax)), scale = the smallest power of two
// that is ≥ p. Computed here by searching powers of two in double precision.
int expected_scale_code(float amax, float qmax, float floor) {
  if (!(amax >= floor)) amax = floor;
  const float p = amax * (1.0f / qmax);
  for (int code = 0; code < 255; ++code) {
    if (std::ldexp(1.0, code - 127) >= static_cast<double>(p)) return code;
  }
  return 254;
}

TEST(DTypesE8m0, ScaleCodeIsPowerOfTwoCeilingWithFloors) {
  struct Format {
    float qmax, floor;
  };
  for (Format f : {Format{kFp8Max, kFp8AmaxFloor}, Format{kFp4Max, kFp4AmaxFloor}}) {
    // Exact multiples qmax·2^k give 2^k; one ulp above needs the next power.
    for (int k = -20; k <= 20; ++k) {
      const float amax = std::ldexp(f.qmax, k);
      if (amax < f.floor) continue;
      EXPECT_EQ(e8m0_scale_code(amax, f.qmax, f.floor), 127 + k) << "amax " << amax;
      EXPECT_EQ(e8m0_scale_code(std::nextafter(amax, 1e30f), f.qmax, f.floor), 128 + k) << "amax above " << amax;
    }
    // Floors: zero, tiny and sub-floor amax all take the floor's scale.
    const int floor_code = expected_scale_code(f.floor, f.qmax, f.floor);
    for (float small : {0.0f, std::numeric_limits<float>::denorm_min(), f.floor * 0.5f, f.floor}) {
      EXPECT_EQ(e8m0_scale_code(small, f.qmax, f.floor), floor_code) << "amax " << small;
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> exponent(-30.0, 30.0);
    for (int i = 0; i < 20000; ++i) {
      const float amax = static_cast<float>(std::exp2(exponent(rng)));
      ASSERT_EQ(e8m0_scale_code(amax, f.qmax, f.floor), expected_scale_code(amax, f.qmax, f.floor)) << amax;
      // The scaled block maximum then fits the format.
      const float s = e8m0_to_float(e8m0_scale_code(amax, f.qmax, f.floor));
      ASSERT_LE(std::max(amax, f.floor) / s, f.qmax * (1 + 1e-6f)) << amax;
    }
  }
  // FP8 floor 1e-4: 1e-4/448 ≈ 2^-22.09 → 2^-22; FP4 floor 6·2^-126 → 2^-126.
  EXPECT_EQ(e8m0_scale_code(0.0f, kFp8Max, kFp8AmaxFloor), 127 - 22);
  EXPECT_EQ(e8m0_scale_code(0.0f, kFp4Max, kFp4AmaxFloor), 1);
}

}  // namespace
}  // namespace dsinfer::core
