// FP8 × bf16 products (linear_fp8bf16.h, Linear with Fp8Products::kBf16Dot): every E4M3 code decoded
// exactly, the per-block order on a hand-made case, every compiled target and the hardware path
// bitwise equal to the oracle at every row count, batch invariance, threads, and validation.
#include "kernels/cpu/linear_fp8bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

struct Fp8TestWeight {
  WeightView view;
  std::vector<uint8_t> codes;
  std::vector<float> scales_f32;
  std::vector<uint8_t> scales_e8m0;
};

Fp8TestWeight fp8_weight(int64_t rows, int64_t cols, uint32_t seed, bool f32_scales) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 130);
  Fp8TestWeight t;
  t.codes.resize(rows * cols);
  for (auto& c : t.codes) {
    do c = static_cast<uint8_t>(byte(rng));
    while ((c & 0x7F) == 0x7F);
  }
  const int64_t blocks = ((rows + 127) / 128) * ((cols + 127) / 128);
  for (int64_t i = 0; i < blocks; ++i) {
    t.scales_f32.push_back(std::ldexp(1.0f + 0.37f * static_cast<float>(i % 7), exponent(rng) - 127));
    t.scales_e8m0.push_back(static_cast<uint8_t>(exponent(rng)));
  }
  t.view = WeightView{WeightFormat::kFP8, rows, cols, t.codes.data(),
                      f32_scales ? static_cast<const void*>(t.scales_f32.data()) : t.scales_e8m0.data(), f32_scales,
                      "fp8test"};
  return t;
}

// Normal values over several binades, with zeros, fp32 subnormals and values that round up in bf16.
std::vector<float> activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 9) - 4);
    if (i % 37 == 5) x[i] = 0.0f;
    if (i % 41 == 7) x[i] = std::ldexp(normal(rng), -130);               // subnormal
    if (i % 43 == 9) x[i] = core::bits_float(0x3F808000u + (i & 1));     // a bf16 tie / just above
  }
  return x;
}

int count_mismatches(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && ++bad <= 3)
      ADD_FAILURE() << what << " [" << i << "] " << got[i] << " vs " << want[i];
  return bad;
}

TEST(Fp8Bf16Linear, EveryCodeDecodesExactlyTimesItsBlockScale) {
  // Row n holds code n (the 254 non-NaN codes) at column 5 (block 0, scale 2^-2) and 130 (block 1,
  // scale 2^3); x rows pick one column each, so y is the exact fp8 value times the scale.
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c)
    if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<uint8_t>(c));
  const int64_t rows = static_cast<int64_t>(codes.size()), cols = 256;
  std::vector<uint8_t> data(rows * cols, 0), scales = {125, 130, 125, 130};
  for (int64_t n = 0; n < rows; ++n) data[n * cols + 5] = data[n * cols + 130] = codes[n];
  const WeightView v{WeightFormat::kFP8, rows, cols, data.data(), scales.data(), false, "codes"};
  std::vector<float> x(2 * cols, 0.0f);
  x[5] = 1.0f;
  x[cols + 130] = 1.0f;
  const Linear lin(v, Fp8Products::kBf16Dot);
  ASSERT_TRUE(lin.bf16_dot());
  std::vector<float> y(2 * rows, -1.0f), ref(2 * rows, -1.0f);
  lin.forward(x.data(), 2, cols, y.data(), rows, nullptr);
  fp8bf16_reference(v, x.data(), 2, cols, ref.data(), rows);
  for (int64_t n = 0; n < rows; ++n) {
    const float value = core::fp8_e4m3_to_float(codes[n]);
    EXPECT_EQ(y[n], value * 0.25f) << "code " << int(codes[n]);
    EXPECT_EQ(y[rows + n], value * 8.0f) << "code " << int(codes[n]);
    EXPECT_EQ(ref[n], value * 0.25f) << "oracle, code " << int(codes[n]);
    EXPECT_EQ(ref[rows + n], value * 8.0f) << "oracle, code " << int(codes[n]);
  }
}

TEST(Fp8Bf16Linear, SumsEachScaleBlockBeforeScalingIt) {
  // W = 1 everywhere (code 0x38), scales 1; x[0] = 2^24, x[128] = x[129] = 1. Per block: 2^24, then
  // 1 + 1 = 2, and 2^24 + 2 is exact. One chain over all k would lose each 1 to rounding (2^24).
  std::vector<uint8_t> data(256, 0x38), scales = {127, 127};
  const WeightView v{WeightFormat::kFP8, 1, 256, data.data(), scales.data(), false, "blocks"};
  std::vector<float> x(256, 0.0f);
  x[0] = 16777216.0f;
  x[128] = x[129] = 1.0f;
  float ref = 0.0f, got = 0.0f;
  fp8bf16_reference(v, x.data(), 1, 256, &ref, 1);
  Linear(v, Fp8Products::kBf16Dot).forward(x.data(), 1, 256, &got, 1, nullptr);
  EXPECT_EQ(ref, 16777218.0f);
  EXPECT_EQ(got, 16777218.0f);
}

TEST(Fp8Bf16Linear, EveryTargetAndRowCountEqualsTheOracleAndTheRowAloneBitwise) {
  core::ThreadPool pool(5);  // more threads than this machine has cores
  struct Case {
    int64_t rows, cols;
    bool f32_scales;
  };
  // 150 rows: a partial panel and two row blocks; 202 / 69 columns: a partial scale block with an odd
  // number of pairs, an odd column.
  for (const Case c : {Case{150, 256, false}, Case{150, 202, true}, Case{40, 69, false}}) {
    const Fp8TestWeight w = fp8_weight(c.rows, c.cols, static_cast<uint32_t>(c.cols), c.f32_scales);
    const Linear lin(w.view, Fp8Products::kBf16Dot);
    ASSERT_TRUE(lin.bf16_dot());
    constexpr int64_t kMaxM = 33;
    const int64_t ldx = c.cols + 3, ldy = c.rows + 1;
    const std::vector<float> x = activations(kMaxM * ldx, 7);
    std::vector<float> want(kMaxM * ldy, 0.0f);
    fp8bf16_reference(w.view, x.data(), kMaxM, ldx, want.data(), ldy);
    const std::string shape = std::to_string(c.rows) + "x" + std::to_string(c.cols);
    for (const SimdTarget& target : available_targets()) {
      ScopedTarget scope(target);
      for (const bool hw : {true, false}) {
        detail::set_bf16dot_hw_allowed(hw);
        const std::string what = target.name + (hw ? " hw " : " scalar ") + shape;
        for (const int64_t M : {1, 2, 3, 5, 8, 13, 16, 17, 33}) {
          std::vector<float> got(M * ldy, 0.0f);
          lin.forward(x.data(), M, ldx, got.data(), ldy, nullptr);
          EXPECT_EQ(count_mismatches(got, std::vector<float>(want.begin(), want.begin() + M * ldy),
                                     what + " M=" + std::to_string(M)),
                    0);
        }
      }
      detail::set_bf16dot_hw_allowed(true);
    }
    // Each row alone gives its row of the batch (best target), on the pool and by output rows.
    std::vector<float> all(kMaxM * ldy, 0.0f);
    lin.forward(x.data(), kMaxM, ldx, all.data(), ldy, &pool);
    EXPECT_EQ(count_mismatches(all, want, "pool " + shape), 0);
    for (int64_t m = 0; m < kMaxM; ++m) {
      std::vector<float> one(c.rows, 0.0f);
      lin.forward(x.data() + m * ldx, 1, ldx, one.data(), c.rows, &pool);
      EXPECT_EQ(std::memcmp(one.data(), all.data() + m * ldy, c.rows * 4), 0) << shape << " row " << m;
    }
    std::vector<float> part(kMaxM * ldy, 0.0f);
    lin.forward_rows(x.data(), kMaxM, ldx, part.data(), ldy, 3, c.rows - 5);
    for (int64_t m = 0; m < kMaxM; ++m)
      for (int64_t n = 0; n < c.rows; ++n) {
        const bool inside = n >= 3 && n < c.rows - 5;
        const float expect = inside ? want[m * ldy + n] : 0.0f;
        if (std::memcmp(&part[m * ldy + n], &expect, 4) != 0) {
          ADD_FAILURE() << "forward_rows " << shape << " [" << m << ", " << n << "] " << part[m * ldy + n];
          m = kMaxM;
          break;
        }
      }
    std::vector<float> many(kMaxM * ldy, 0.0f);
    const LinearCall calls[] = {{&lin, x.data(), 16, ldx, many.data(), ldy},
                                {&lin, x.data() + 16 * ldx, kMaxM - 16, ldx, many.data() + 16 * ldy, ldy}};
    linear_forward_many(calls, &pool);
    EXPECT_EQ(count_mismatches(many, want, "linear_forward_many " + shape), 0);
  }
}

TEST(Fp8Bf16Linear, PrefillRowCountsEqualTheOracleAndTheRowAloneBitwise) {
  // From 17 rows x is converted once per product into 128-column blocks (tiles of 16, 8, 4 and 1 rows):
  // row counts around every tile edge, up to a prefill's 512, alone, on a pool (split by rows of x and
  // of the weight), by output rows, and as two products of one x in one region (one conversion).
  core::ThreadPool pool(3);
  struct Case {
    int64_t rows, cols;
    bool f32_scales;
  };
  // 330 columns: three scale blocks, the last of 37 pairs; 69: one block with an odd column.
  for (const Case c : {Case{150, 330, false}, Case{40, 69, true}}) {
    const Fp8TestWeight w = fp8_weight(c.rows, c.cols, static_cast<uint32_t>(c.cols + 1), c.f32_scales);
    const Linear lin(w.view, Fp8Products::kBf16Dot);
    constexpr int64_t kMaxM = 512;
    const int64_t ldx = c.cols + 1, ldy = c.rows + 2;
    const std::vector<float> x = activations(kMaxM * ldx, 11);
    std::vector<float> want(kMaxM * ldy, 0.0f);
    fp8bf16_reference(w.view, x.data(), kMaxM, ldx, want.data(), ldy);
    const std::string shape = std::to_string(c.rows) + "x" + std::to_string(c.cols);
    for (const bool hw : {true, false}) {
      detail::set_bf16dot_hw_allowed(hw);
      for (const int64_t M : {15, 16, 17, 20, 31, 32, 33, 63, 64, 65, 511, 512}) {
        if (!hw && M > 65) continue;  // the oracle's loop: slow, and the same code at every M
        const std::string what = std::string(hw ? "hw " : "scalar ") + shape + " M=" + std::to_string(M);
        const std::vector<float> expect(want.begin(), want.begin() + M * ldy);
        std::vector<float> got(M * ldy, 0.0f);
        lin.forward(x.data(), M, ldx, got.data(), ldy, nullptr);
        EXPECT_EQ(count_mismatches(got, expect, what), 0);
        std::fill(got.begin(), got.end(), 0.0f);
        lin.forward(x.data(), M, ldx, got.data(), ldy, &pool);
        EXPECT_EQ(count_mismatches(got, expect, "pool " + what), 0);
        std::vector<float> a(M * ldy, 0.0f), b(M * ldy, 0.0f);
        const LinearCall calls[] = {{&lin, x.data(), M, ldx, a.data(), ldy}, {&lin, x.data(), M, ldx, b.data(), ldy}};
        linear_forward_many(calls, &pool);
        EXPECT_EQ(count_mismatches(a, expect, "many[0] " + what), 0);
        EXPECT_EQ(count_mismatches(b, expect, "many[1] " + what), 0);
        std::vector<float> part(M * ldy, 0.0f);
        lin.forward_rows(x.data(), M, ldx, part.data(), ldy, 17, c.rows - 3);
        int bad = 0;
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < c.rows; ++n) {
            const float e = n >= 17 && n < c.rows - 3 ? want[m * ldy + n] : 0.0f;
            bad += std::memcmp(&part[m * ldy + n], &e, 4) != 0;
          }
        EXPECT_EQ(bad, 0) << "forward_rows " << what;
      }
    }
    detail::set_bf16dot_hw_allowed(true);
    for (const int64_t m : {0, 16, 255, 511}) {
      std::vector<float> one(c.rows, 0.0f);
      lin.forward(x.data() + m * ldx, 1, ldx, one.data(), c.rows, &pool);
      EXPECT_EQ(std::memcmp(one.data(), want.data() + m * ldy, c.rows * 4), 0) << shape << " row " << m << " alone";
    }
  }
}

TEST(Fp8Bf16Linear, OtherFormatsIgnoreTheOptionAndNanCodesAreRejected) {
  std::vector<uint16_t> bf(16 * 32, core::float_to_bf16(0.5f));
  const WeightView b{WeightFormat::kBF16, 16, 32, bf.data(), nullptr, false, "bf"};
  const Linear lb(b, Fp8Products::kBf16Dot);
  EXPECT_FALSE(lb.bf16_dot());
  Fp8TestWeight w = fp8_weight(20, 64, 1, false);
  EXPECT_EQ(Linear(w.view, Fp8Products::kBf16Dot).bytes(), 2 * 32 * 32 + 4) << "two panels of 32 pairs, one scale";
  w.codes[3 * 64 + 9] = 0xFF;
  try {
    const Linear bad(w.view, Fp8Products::kBf16Dot);
    ADD_FAILURE() << "a NaN code was accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[3, 9]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("fp8test"), std::string::npos) << e.what();
  }
}

TEST(Fp8Bf16Linear, ScaleBlocksOtherThan128AreRefused) {
  Fp8TestWeight w = fp8_weight(32, 32, 1, false);  // one scale block whichever the edge
  w.view.fp8_block = 32;
  EXPECT_NO_THROW(Linear(w.view, Fp8Products::kExact));
  try {
    const Linear bad(w.view, Fp8Products::kBf16Dot);
    ADD_FAILURE() << "a 32x32-block FP8 weight was packed for the 128-block bf16-dot kernel";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not 32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsinfer::kernels
