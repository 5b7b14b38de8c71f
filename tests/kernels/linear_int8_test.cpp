// Fp4Int8Linear (the int8 × FP4 product of --numerics fast): activation quantization with hand-checked
// values, the oracle's integer arithmetic on a hand-computed case, every compiled SIMD target (and both
// the VNNI and maddubs paths) bitwise equal to the oracle, batch invariance, the distance to the fp32
// product bounded by the quantization step, and input validation.
#include "kernels/cpu/linear_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

struct Fp4Weight {
  WeightView view;
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
};

// Random codes over all 16 E2M1 codes; E8M0 scales over several binades, or non-power-of-two f32 scales.
Fp4Weight make_fp4(int64_t rows, int64_t cols, uint32_t seed, bool scales_f32) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 130);
  Fp4Weight t;
  t.view.format = WeightFormat::kFP4;
  t.view.rows = rows;
  t.view.cols = cols;
  t.view.scales_f32 = scales_f32;
  t.view.name = "test";
  t.data.resize(rows * cols / 2);
  for (auto& c : t.data) c = static_cast<uint8_t>(byte(rng));
  const int64_t count = rows * (cols / 32);
  if (scales_f32) {
    t.scales.resize(count * 4);
    for (int64_t i = 0; i < count; ++i) {
      const float s = std::ldexp(1.0f + 0.37f * static_cast<float>(i % 7), exponent(rng) - 127);
      std::memcpy(t.scales.data() + i * 4, &s, 4);
    }
  } else {
    t.scales.resize(count);
    for (auto& s : t.scales) s = static_cast<uint8_t>(exponent(rng));
  }
  t.view.data = t.data.data();
  t.view.scales = t.scales.data();
  return t;
}

std::vector<float> make_scaled_x(int64_t M, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(M * ld);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 7) - 3);
  return x;
}

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> xs;
  int64_t ldq = 0, lds = 0;
};

Quantized quantize(const std::vector<float>& x, int64_t M, int64_t ldx, int64_t K, int64_t block) {
  Quantized out;
  out.ldq = K + 3;  // strides that differ from K catch indexing by K
  out.lds = int8_block_count(K, block) + 1;
  out.q.assign(M * out.ldq, 0);
  out.xs.assign(M * out.lds, 0.0f);
  quantize_int8_blocks(x.data(), M, ldx, K, block, out.q.data(), out.ldq, out.xs.data(), out.lds);
  return out;
}

void expect_bitwise_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0 && ++bad <= 5)
      ADD_FAILURE() << what << ": [" << i << "] " << a[i] << " vs " << b[i];
  }
  EXPECT_EQ(bad, 0) << what;
}

// Every dot path and nibble decode in `paths` for each row count in `Ms`: the product equals the oracle
// bitwise, on the calling thread and split over a pool, and every row equals that row computed alone.
struct DotPath {
  bool vnni, vbmi;
  const char* name;
};
void expect_rows_equal_the_oracle_and_alone(int64_t rows, int64_t cols, uint32_t seed, uint32_t x_seed,
                                            std::initializer_list<int64_t> Ms, std::initializer_list<DotPath> paths) {
  constexpr int64_t block = 128;
  const Fp4Weight w = make_fp4(rows, cols, seed, false);
  const Fp4Int8Linear lin(w.view);
  core::ThreadPool pool(3);
  int64_t checked = 0;
  for (const int64_t M : Ms) {
    const int64_t ldx = cols + 1, ldy = rows + 3;
    const std::vector<float> x = make_scaled_x(M, ldx, x_seed + static_cast<uint32_t>(M));
    const Quantized qx = quantize(x, M, ldx, cols, block);
    std::vector<float> want(M * ldy, 0.0f);
    fp4_int8_reference(w.view, qx.q.data(), qx.ldq, qx.xs.data(), qx.lds, M, block, want.data(), ldy);
    for (const SimdTarget& target : available_targets()) {
      ScopedTarget scope(target);
      for (const DotPath& path : paths) {
        detail::set_int8_vnni_allowed(path.vnni);
        detail::set_int8_vbmi_allowed(path.vbmi);
        const std::string what = target.name + path.name + " M=" + std::to_string(M);
        for (core::ThreadPool* p : {static_cast<core::ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(M * ldy, 0.0f);
          lin.forward_quantized(qx.q.data(), qx.ldq, qx.xs.data(), qx.lds, M, block, got.data(), ldy, p);
          expect_bitwise_equal(got, want, what + (p ? " pool" : ""));
          ++checked;
        }
        for (int64_t m = 0; m < M; ++m) {
          std::vector<float> one(ldy, 0.0f);
          lin.forward_quantized(qx.q.data() + m * qx.ldq, qx.ldq, qx.xs.data() + m * qx.lds, qx.lds, 1, block,
                                one.data(), ldy, nullptr);
          expect_bitwise_equal(one, std::vector<float>(want.begin() + m * ldy, want.begin() + (m + 1) * ldy),
                               what + " row " + std::to_string(m) + " alone");
        }
      }
      detail::set_int8_vnni_allowed(true);
      detail::set_int8_vbmi_allowed(true);
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(QuantizeInt8Blocks, HandCheckedValues) {
  constexpr int64_t K = 96, block = 32;
  std::vector<float> x(K, 0.0f);
  x[0] = 127.0f;   // amax of block 0: scale 1, so q = round_half_even(x)
  x[1] = -63.5f;   // ties to even: -64
  x[2] = 0.5f;     // ties to even: 0
  x[3] = -2.5f;    // ties to even: -2
  x[4] = 1.25f;    // 1
  // block 1 stays zero: scale 0, q 0
  x[64] = std::numeric_limits<float>::infinity();  // block 2: NaN scale
  x[65] = 3.0f;
  std::vector<int8_t> q(K, 99);
  std::vector<float> xs(3, -1.0f);
  quantize_int8_blocks(x.data(), 1, K, K, block, q.data(), K, xs.data(), 3);
  EXPECT_EQ(xs[0], 1.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -64);
  EXPECT_EQ(q[2], 0);
  EXPECT_EQ(q[3], -2);
  EXPECT_EQ(q[4], 1);
  EXPECT_EQ(q[5], 0);
  EXPECT_EQ(xs[1], 0.0f);
  for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(q[k], 0) << k;
  EXPECT_TRUE(std::isnan(xs[2]));
  EXPECT_EQ(q[65], 0);

  // A last block shorter than `block`, and a negative amax element mapping to -127.
  std::vector<float> y = {-4.0f, 2.0f, 1.0f};
  std::vector<int8_t> qy(3);
  float ys[2] = {0.0f, 0.0f};
  quantize_int8_blocks(y.data(), 1, 3, 3, 2, qy.data(), 3, ys, 2);
  EXPECT_EQ(ys[0], 4.0f / 127.0f);
  EXPECT_EQ(qy[0], -127);
  EXPECT_EQ(qy[1], 64);  // 2 · 127/4 = 63.5, ties to even
  EXPECT_EQ(ys[1], 1.0f / 127.0f);
  EXPECT_EQ(qy[2], 127);
}

TEST(Fp4Int8Linear, OracleIsTheExactIntegerDot) {
  // One row of 64 columns: group 0 all code 7 (e2m1 6, w2 12), group 1 all code 0xF (-6, w2 -12) except
  // its first column code 1 (0.5, w2 1). Scales 2^0 and 2^1. q = 127 everywhere, xs = 0.25 and 1.
  std::vector<uint8_t> data(32), scales = {127, 128};
  for (int i = 0; i < 16; ++i) data[i] = 0x77;
  for (int i = 16; i < 32; ++i) data[i] = 0xFF;
  data[16] = 0xF1;
  WeightView w{WeightFormat::kFP4, 1, 64, data.data(), scales.data(), false, "hand"};
  std::vector<int8_t> q(64, 127);
  const float xs[2] = {0.25f, 1.0f};
  float y = 0.0f;
  fp4_int8_reference(w, q.data(), 64, xs, 2, 1, 32, &y, 1);
  // group 0: 127·12·32 = 48768, × 0.25 × 2^0/2 = 6096; group 1: 127·(1 - 12·31) = -47117, × 1 × 2^1/2.
  EXPECT_EQ(y, 6096.0f - 47117.0f);

  Fp4Int8Linear lin(w);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    float z = 0.0f;
    lin.forward_quantized(q.data(), 64, xs, 2, 1, 32, &z, 1, nullptr);
    EXPECT_EQ(z, y) << target.name;
  }
}

TEST(Fp4Int8Linear, EveryTargetAndDotPathEqualsTheOracleBitwise) {
  core::ThreadPool pool(3);
  int64_t checked = 0;
  for (const bool scales_f32 : {false, true}) {
    for (const int64_t block : {int64_t{32}, int64_t{128}}) {
      constexpr int64_t rows = 37, cols = 288;  // a partial panel; 288 is not a multiple of 128
      const Fp4Weight w = make_fp4(rows, cols, 11u + static_cast<uint32_t>(block) + (scales_f32 ? 1u : 0u), scales_f32);
      const Fp4Int8Linear lin(w.view);
      for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{17}}) {
        const int64_t ldx = cols + 5;
        std::vector<float> x = make_scaled_x(M, ldx, static_cast<uint32_t>(M * 7 + block));
        if (M > 2) std::fill(x.begin() + ldx, x.begin() + 2 * ldx, 0.0f);  // an all-zero row
        const Quantized qx = quantize(x, M, ldx, cols, block);
        const int64_t ldy = rows + 2;
        std::vector<float> want(M * ldy, 0.0f);
        fp4_int8_reference(w.view, qx.q.data(), qx.ldq, qx.xs.data(), qx.lds, M, block, want.data(), ldy);
        for (const SimdTarget& target : available_targets()) {
          ScopedTarget scope(target);
          for (const bool vnni : {true, false}) {
            detail::set_int8_vnni_allowed(vnni);
            for (core::ThreadPool* p : {static_cast<core::ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got(M * ldy, 0.0f);
              lin.forward_quantized(qx.q.data(), qx.ldq, qx.xs.data(), qx.lds, M, block, got.data(), ldy, p);
              expect_bitwise_equal(got, want,
                                   target.name + (vnni ? " vnni" : " maddubs") + " M=" + std::to_string(M) +
                                       " block=" + std::to_string(block) + (scales_f32 ? " f32 scales" : "") +
                                       (p ? " pool" : ""));
              ++checked;
            }
          }
          detail::set_int8_vnni_allowed(true);
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// 1..4 rows of x (an expert's rows in a decode step) run a kernel of their own that computes several
// panels at once: 10 panels (the last partial) give whole tiles and a remainder for every tile width,
// each target and dot path against the oracle, and every row equal to the row computed alone.
TEST(Fp4Int8Linear, DecodeTilesEqualTheOracleAndTheRowAloneBitwise) {
  expect_rows_equal_the_oracle_and_alone(16 * 9 + 5, 320, 23u, 40u, {1, 2, 3, 4},
                                         {{true, true, " vnni"}, {false, false, " maddubs"}});
}

// The kernels prefetch 8 groups ahead, past a panel's last group into the next panels' first ones
// (linear_int8_simd.cpp): weights of fewer groups than that (2 and 5 groups), whole and split over
// threads, stay bitwise the oracle's in the tiles and the panel kernel.
TEST(Fp4Int8Linear, WeightsOfFewerGroupsThanThePrefetchDistanceEqualTheOracleBitwise) {
  for (const int64_t cols : {int64_t{64}, int64_t{160}}) {
    expect_rows_equal_the_oracle_and_alone(16 * 40 + 3, cols, 61u + static_cast<uint32_t>(cols), 70u, {1, 2, 3, 4, 6},
                                           {{true, true, " vnni"}, {false, false, " maddubs"}});
  }
}

TEST(Fp4Int8Linear, BytesPerGroupAreTheNibblesPlusABf16ScaleForE8M0Scales) {
  constexpr int64_t rows = 37, cols = 288, panel_rows = 48, groups = cols / 32;
  const Fp4Int8Linear e8m0(make_fp4(rows, cols, 3u, false).view);
  const Fp4Int8Linear f32(make_fp4(rows, cols, 3u, true).view);
  EXPECT_EQ(e8m0.bytes(), panel_rows * cols / 2 + panel_rows * groups * 2);
  EXPECT_EQ(f32.bytes(), panel_rows * cols / 2 + panel_rows * groups * 4);
}

// A pool of many more threads than cores (sized for a 64+ core server): the panels split into more
// tasks than the machine runs at once; every target's result stays bitwise the calling thread's alone.
TEST(Fp4Int8Linear, MoreThreadsThanCoresGiveBitwiseTheSameResult) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  core::ThreadPool pool(std::clamp(4 * cores, 64, 256));
  ASSERT_GT(pool.size(), cores);
  constexpr int64_t rows = 16 * 40 + 3, cols = 256, block = 128;
  const Fp4Weight w = make_fp4(rows, cols, 31u, false);
  const Fp4Int8Linear lin(w.view);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    for (const int64_t M : {int64_t{1}, int64_t{3}, int64_t{16}}) {
      const std::vector<float> x = make_scaled_x(M, cols, static_cast<uint32_t>(60 + M));
      std::vector<float> alone(M * rows), many(M * rows);
      lin.forward(x.data(), M, cols, block, alone.data(), rows, nullptr);
      lin.forward(x.data(), M, cols, block, many.data(), rows, &pool);
      expect_bitwise_equal(many, alone, target.name + " M=" + std::to_string(M) + " threads=" +
                                            std::to_string(pool.size()));
    }
  }
}

TEST(Fp4Int8Linear, BatchInvariantBitForBit) {
  constexpr int64_t rows = 50, cols = 256, M = 13, block = 128;
  const Fp4Weight w = make_fp4(rows, cols, 5u, false);
  const Fp4Int8Linear lin(w.view);
  const std::vector<float> x = make_scaled_x(M, cols, 77u);
  core::ThreadPool pool(4);
  std::vector<float> all(M * rows);
  lin.forward(x.data(), M, cols, block, all.data(), rows, &pool);
  for (int64_t m = 0; m < M; ++m) {
    std::vector<float> one(rows);
    lin.forward(x.data() + m * cols, 1, cols, block, one.data(), rows, nullptr);
    expect_bitwise_equal(one, std::vector<float>(all.begin() + m * rows, all.begin() + (m + 1) * rows),
                         "row " + std::to_string(m));
  }
}

// Against the fp32 product: each activation is off by at most half a quantization step (xs / 2, plus
// the one rounding of x · 127/amax, < 2^-16 of a step), so |y_int8 - y_f32| <= Σ_k |W[n][k]| · xs · 0.50002
// plus the fp32 rounding of both sums (K·2^-24 of their magnitudes each, with margin).
TEST(Fp4Int8Linear, WithinHalfAQuantizationStepOfTheFp32Product) {
  constexpr int64_t rows = 40, cols = 512, M = 3, block = 128;
  const Fp4Weight w = make_fp4(rows, cols, 9u, false);
  const Fp4Int8Linear lin(w.view);
  const std::vector<float> x = make_scaled_x(M, cols, 3u);
  const Quantized qx = quantize(x, M, cols, cols, block);
  std::vector<float> fast(M * rows), exact(M * rows);
  lin.forward(x.data(), M, cols, block, fast.data(), rows, nullptr);
  linear_reference(w.view, x.data(), M, cols, exact.data(), rows);
  const double u = std::ldexp(1.0, -24);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < rows; ++n) {
      double step_bound = 0.0, mag = 0.0;
      for (int64_t k = 0; k < cols; ++k) {
        const double wk = std::fabs(static_cast<double>(weight_at(w.view, n, k)));
        step_bound += wk * static_cast<double>(qx.xs[m * qx.lds + k / block]) * 0.50002;
        const double step = static_cast<double>(qx.xs[m * qx.lds + k / block]);
        mag += wk * (std::fabs(static_cast<double>(x[m * cols + k])) + step);
      }
      const double bound = step_bound + 4.0 * static_cast<double>(cols) * u * mag;
      EXPECT_LE(std::fabs(static_cast<double>(fast[m * rows + n]) - exact[m * rows + n]), bound) << m << ", " << n;
    }
  }
}

// The vectorized quantization of every target against the header's formula written out here: blocks
// with ties of x · 127/amax, zeros and -0, an Inf and a NaN block, and lengths that leave vector tails.
TEST(QuantizeInt8Blocks, EveryTargetEqualsTheScalarFormulaBitwise) {
  std::mt19937 rng(17u);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int64_t checked = 0;
  for (const int64_t block : {int64_t{32}, int64_t{100}, int64_t{128}}) {
    for (const int64_t K : {int64_t{7}, int64_t{288}, int64_t{1024}}) {
      constexpr int64_t M = 4;
      const int64_t ldx = K + 2, blocks = int8_block_count(K, block), ldq = K + 1, lds = blocks + 1;
      std::vector<float> x(M * ldx);
      for (size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 9) - 4);
      // Row 1: amax 127 (inv 1), so the halves are ties: round half to even.
      for (int64_t k = 0; k < K; ++k) x[ldx + k] = static_cast<float>(k % 11) - 5.5f;
      x[ldx] = 127.0f;
      x[2 * ldx + K - 1] = std::numeric_limits<float>::infinity();  // row 2: the last block Inf
      x[3 * ldx] = std::numeric_limits<float>::quiet_NaN();           // row 3: the first block NaN
      std::fill(x.begin() + 3 * ldx + K / 2, x.begin() + 3 * ldx + K, -0.0f);
      std::vector<int8_t> want_q(M * ldq, 99);
      std::vector<float> want_s(M * lds, -1.0f);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t k0 = b * block, k1 = std::min(K, k0 + block);
          float amax = 0.0f;
          bool finite = true;
          for (int64_t k = k0; k < k1; ++k) {
            finite = finite && std::isfinite(x[m * ldx + k]);
            amax = std::max(amax, std::fabs(x[m * ldx + k]));
          }
          want_s[m * lds + b] = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
          const float inv = finite && amax > 0.0f ? 127.0f / amax : 0.0f;
          for (int64_t k = k0; k < k1; ++k) {
            const float r = std::nearbyint(x[m * ldx + k] * inv);
            want_q[m * ldq + k] = finite ? static_cast<int8_t>(std::clamp(r, -127.0f, 127.0f)) : int8_t{0};
          }
        }
      }
      for (const SimdTarget& target : available_targets()) {
        ScopedTarget scope(target);
        std::vector<int8_t> q(M * ldq, 99);
        std::vector<float> xs(M * lds, -1.0f);
        quantize_int8_blocks(x.data(), M, ldx, K, block, q.data(), ldq, xs.data(), lds);
        const std::string what = target.name + " K=" + std::to_string(K) + " block=" + std::to_string(block);
        EXPECT_EQ(q, want_q) << what;
        ASSERT_EQ(std::memcmp(xs.data(), want_s.data(), xs.size() * 4), 0) << what;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

// Every dot path and nibble decode (VNNI with vpermb or pshufb, maddubs) for 1..17 rows of x (up to 4
// rows the register tiles, more the panel kernel): each row stays bitwise the oracle's and its own
// result alone, on the calling thread and split over a pool.
TEST(Fp4Int8Linear, EveryDecodeAndRowCountEqualsTheOracleAndTheRowAloneBitwise) {
  // An odd panel count and a partial panel; up to 4 rows the register tiles, more the panel kernel.
  expect_rows_equal_the_oracle_and_alone(16 * 7 + 9, 352, 47u, 90u, {1, 3, 5, 8, 9, 16, 17},
                                         {{true, true, " vnni+vpermb"}, {true, false, " vnni+pshufb"},
                                          {false, false, " maddubs"}});
}

TEST(Fp4Int8Linear, RejectsBadInput) {
  Fp4Weight w = make_fp4(16, 64, 1u, false);
  WeightView bf = w.view;
  bf.format = WeightFormat::kBF16;
  EXPECT_THROW(Fp4Int8Linear{bf}, core::Error);
  WeightView narrow = w.view;
  narrow.cols = 48;
  EXPECT_THROW(Fp4Int8Linear{narrow}, core::Error);
  w.scales[5] = 0xFF;
  EXPECT_THROW(Fp4Int8Linear{w.view}, core::Error);
  w.scales[5] = 127;
  const Fp4Int8Linear lin(w.view);
  std::vector<float> x(64, 1.0f), y(16);
  EXPECT_THROW(lin.forward(x.data(), 1, 64, 48, y.data(), 16, nullptr), core::Error);
  EXPECT_THROW(lin.forward(x.data(), 1, 64, 0, y.data(), 16, nullptr), core::Error);
}

}  // namespace
}  // namespace dsinfer::kernels
