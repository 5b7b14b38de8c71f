// FP8 / FP4 block QDQ and cache encodings against an independent definition, and the SIMD FP8
// decoder of every target against the scalar decoder over all 256 codes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "kernels/cpu/qdq.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

// Independent model of the formats: enumerate every representable magnitude and pick the nearest,
// ties to the even code; the scale is the smallest power of two with amax / scale <= qmax.
std::vector<double> grid(bool fp8) {
  std::vector<double> g;
  if (fp8) {
    for (int e = 0; e < 16; ++e)
      for (int m = 0; m < 8; ++m) {
        if (e == 15 && m == 7) continue;
        g.push_back(e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
      }
  } else {
    g = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  }
  return g;
}

double nearest(const std::vector<double>& g, double v) {
  const double a = std::fabs(v);
  size_t best = 0;
  for (size_t i = 1; i < g.size(); ++i) {
    const double di = std::fabs(g[i] - a), db = std::fabs(g[best] - a);
    if (di < db || (di == db && i % 2 == 0)) best = i;  // codes ascend with magnitude: even index = even code
  }
  return std::copysign(g[best], v);
}

std::vector<double> qdq_model(const std::vector<float>& x, int64_t block, bool fp8) {
  const auto g = grid(fp8);
  const double qmax = fp8 ? 448.0 : 6.0;
  const double floor_amax = fp8 ? 1e-4 : 6.0 * std::ldexp(1.0, -126);
  std::vector<double> y(x.size());
  for (size_t b = 0; b < x.size(); b += block) {
    double amax = 0;
    for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[b + i])));
    amax = std::max(amax, static_cast<double>(static_cast<float>(floor_amax)));
    const double ratio = static_cast<double>(static_cast<float>(amax) * (1.0f / static_cast<float>(qmax)));
    const double s = std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(ratio))));
    for (int64_t i = 0; i < block; ++i) {
      const double v = std::clamp(x[b + i] / s, -qmax, qmax);
      y[b + i] = nearest(g, v) * s;
    }
  }
  return y;
}

std::vector<float> test_values(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> exp_dist(-12.0f, 6.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng) * std::exp2(exp_dist(rng));
  for (int64_t i = 0; i < n; i += 17) v[i] = 0.0f;
  return v;
}

TEST(Fp8Block, QdqMatchesIndependentModel) {
  for (int64_t block : {64, 128}) {
    auto x = test_values(block * 9, 3 + block);
    for (int64_t i = 0; i < block; ++i) x[i] = 1e-7f * (i - 30);  // tiny block: amax floor
    const auto model = qdq_model(x, block, true);
    auto y = x;
    fp8_block_qdq(y.data(), static_cast<int64_t>(y.size()), block);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(static_cast<double>(y[i]), model[i]) << "i=" << i << " x=" << x[i];
    // The compact encoding decodes to exactly the QDQ values.
    std::vector<uint8_t> codes(x.size()), scales(x.size() / block);
    fp8_block_encode(x.data(), static_cast<int64_t>(x.size()), block, codes.data(), scales.data());
    std::vector<float> dec(x.size());
    fp8_block_decode_scalar(codes.data(), scales.data(), static_cast<int64_t>(x.size()), block, dec.data());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(dec[i], y[i]) << i;
  }
}

TEST(Fp4Block, QdqMatchesIndependentModel) {
  auto x = test_values(32 * 20, 5);
  // Exact ties of the grid after scaling: scale is 1 for a block with amax 6.
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, -0.25f, -2.5f, 6.0f};
  for (int i = 0; i < 10; ++i) x[i] = ties[i];
  const auto model = qdq_model(x, 32, false);
  auto y = x;
  fp4_block_qdq(y.data(), static_cast<int64_t>(y.size()), 32);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(static_cast<double>(y[i]), model[i]) << "i=" << i << " x=" << x[i];
  std::vector<uint8_t> packed(x.size() / 2), scales(x.size() / 32);
  fp4_block_encode(x.data(), static_cast<int64_t>(x.size()), 32, packed.data(), scales.data());
  std::vector<float> dec(x.size());
  fp4_block_decode(packed.data(), scales.data(), static_cast<int64_t>(x.size()), 32, dec.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(dec[i], y[i]) << i;
}

TEST(Fp8Block, EveryTargetDecodesAllCodesLikeScalar) {
  const int64_t block = 64;
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));  // NaN codes are never stored
  while (codes.size() % block) codes.push_back(0x38);
  const int64_t n = static_cast<int64_t>(codes.size());
  std::vector<uint8_t> scales(n / block);
  const uint8_t scale_codes[] = {127, 100, 1, 140};  // 1, 2^-27, 2^-126, 2^13
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = scale_codes[i % 4];
  std::vector<float> ref(n);
  fp8_block_decode_scalar(codes.data(), scales.data(), n, block, ref.data());
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    std::vector<float> out(n);
    fp8_block_decode(codes.data(), scales.data(), n, block, out.data());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(core::float_bits(out[i]), core::float_bits(ref[i])) << target.name << " code " << int(codes[i]);
  }
}

// The bf16 decode is the high half of the float one, and for every scale at or above 2^-117 (the
// encoder's are) that half is the whole value: every code, scales from 2^-117 to 2^100.
TEST(Fp8Block, Bf16DecodeIsTheExactValueOnEveryTarget) {
  const int64_t block = 64;
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));
  while (codes.size() % block) codes.push_back(0xB8);
  const int64_t n = static_cast<int64_t>(codes.size());
  std::vector<uint8_t> scales(n / block);
  for (const uint8_t scale_code : {uint8_t{10}, uint8_t{105}, uint8_t{127}, uint8_t{227}}) {
    std::fill(scales.begin(), scales.end(), scale_code);
    std::vector<float> ref(n);
    fp8_block_decode_scalar(codes.data(), scales.data(), n, block, ref.data());
    for (const auto& target : available_targets()) {
      ScopedTarget scope(target);
      std::vector<uint16_t> out(n, 0x1234);
      fp8_block_decode_bf16(codes.data(), scales.data(), n, block, out.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], core::float_bits(ref[i]) >> 16) << target.name << " code " << int(codes[i]);
        ASSERT_EQ(core::float_bits(core::bf16_to_float(out[i])), core::float_bits(ref[i]))
            << target.name << " code " << int(codes[i]) << " scale code " << int(scale_code);
      }
    }
  }
}

}  // namespace
}  // namespace dsinfer::kernels
