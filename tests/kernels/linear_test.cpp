// Linear against the scalar oracle (every format, awkward shapes, every compiled SIMD target this CPU
// runs), batch invariance bit for bit, and input validation.
#include "kernels/cpu/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear_packed.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

// A weight of any format with storage owned by the test.
struct TestWeight {
  WeightView view;
  std::vector<uint8_t> data;
  std::vector<uint8_t> scales;
};

// Random codes over the whole range of each format (FP8 subnormals and zeros included, NaN codes
// excluded), with scales spread over several binades.
TestWeight make_weight(WeightFormat format, int64_t rows, int64_t cols, uint32_t seed, bool scales_f32 = false,
                       int scale_lo = 118, int scale_hi = 130, int64_t fp8_block = 128) {
  std::mt19937 rng(seed);
  TestWeight t;
  t.view.format = format;
  t.view.fp8_block = fp8_block;
  t.view.rows = rows;
  t.view.cols = cols;
  t.view.scales_f32 = scales_f32;
  t.view.name = "test";
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> exponent(scale_lo, scale_hi);
  auto add_scales = [&](int64_t count) {
    if (scales_f32) {
      t.scales.resize(count * 4);
      for (int64_t i = 0; i < count; ++i) {
        // Not powers of two: the decoded weight is then a rounded product, as in the oracle.
        const float s = std::ldexp(1.0f + 0.37f * static_cast<float>(i % 7), exponent(rng) - 127);
        std::memcpy(t.scales.data() + i * 4, &s, 4);
      }
    } else {
      t.scales.resize(count);
      for (auto& s : t.scales) s = static_cast<uint8_t>(exponent(rng));
    }
  };
  switch (format) {
    case WeightFormat::kF32:
      t.data.resize(rows * cols * 4);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = normal(rng) * std::ldexp(1.0f, static_cast<int>(i % 5) - 2);
        std::memcpy(t.data.data() + i * 4, &v, 4);
      }
      break;
    case WeightFormat::kBF16:
      t.data.resize(rows * cols * 2);
      for (int64_t i = 0; i < rows * cols; ++i) {
        const uint16_t v = core::float_to_bf16(normal(rng));
        std::memcpy(t.data.data() + i * 2, &v, 2);
      }
      break;
    case WeightFormat::kFP8:
      t.data.resize(rows * cols);
      for (auto& c : t.data) {
        do c = static_cast<uint8_t>(byte(rng));
        while ((c & 0x7F) == 0x7F);
      }
      add_scales(((rows + fp8_block - 1) / fp8_block) * ((cols + fp8_block - 1) / fp8_block));
      break;
    case WeightFormat::kFP4:
      t.data.resize(rows * cols / 2);
      for (auto& c : t.data) c = static_cast<uint8_t>(byte(rng));
      add_scales(rows * (cols / 32));
      break;
  }
  t.view.data = t.data.data();
  t.view.scales = t.scales.empty() ? nullptr : t.scales.data();
  return t;
}

std::vector<float> make_x(int64_t M, int64_t ld, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(M * ld);
  for (auto& v : x) v = normal(rng);
  for (size_t i = 0; i < x.size(); i += 11) x[i] = 0.0f;
  return x;
}

// Every result with K terms summed in any fixed order with one rounding per product and per add (or
// one per FMA) is within K·u·Σ|x·w| (u = 2^-24, first order) of the exact sum, which the products
// computed in double give here (an fp32 × fp32 product is exact in double).
void expect_close_to_exact(const WeightView& w, const float* x, int64_t M, int64_t ldx, const float* y, int64_t ldy,
                           const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  int64_t bad = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      double exact = 0.0, mag = 0.0;
      for (int64_t k = 0; k < w.cols; ++k) {
        const double p = static_cast<double>(x[m * ldx + k]) * static_cast<double>(weight_at(w, n, k));
        exact += p;
        mag += std::fabs(p);
      }
      const double bound = 1.01 * static_cast<double>(w.cols + 1) * u * mag + 1e-37;
      const double got = y[m * ldy + n];
      if (!(std::fabs(got - exact) <= bound)) {
        if (++bad <= 5) {
          ADD_FAILURE() << what << ": y[" << m << "][" << n << "] = " << got << ", exact " << exact << ", bound "
                        << bound;
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

void expect_bitwise_equal(const float* a, const float* b, int64_t M, int64_t N, int64_t lda, int64_t ldb,
                          const std::string& what) {
  int64_t bad = 0;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      if (std::memcmp(&a[m * lda + n], &b[m * ldb + n], 4) != 0 && ++bad <= 5) {
        ADD_FAILURE() << what << ": [" << m << "][" << n << "] " << a[m * lda + n] << " vs " << b[m * ldb + n];
      }
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

const WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFP8, WeightFormat::kFP4};

// One rows x cols product of every format, the i-th on 1 + i * m_step rows of x, each one's result on
// the calling thread alone as its reference, and the LinearCalls that write ys (for linear_forward_many).
struct ProductBatch {
  std::vector<TestWeight> ws;
  std::vector<Linear> lins;
  std::vector<std::vector<float>> xs, ys, refs;
  std::vector<LinearCall> calls;
  ProductBatch(int64_t rows, int64_t cols, int64_t m_step, uint32_t& seed) {
    for (WeightFormat f : kFormats) ws.push_back(make_weight(f, rows, cols, ++seed));
    for (const auto& w : ws) lins.emplace_back(w.view);
    for (size_t i = 0; i < lins.size(); ++i) {
      const int64_t M = 1 + static_cast<int64_t>(i) * m_step;
      xs.push_back(make_x(M, cols, ++seed));
      ys.emplace_back(M * rows);
      refs.emplace_back(M * rows);
      lins[i].forward(xs[i].data(), M, cols, refs[i].data(), rows, nullptr);
      calls.push_back({&lins[i], xs[i].data(), M, cols, ys[i].data(), rows});
    }
  }
  void expect_results(const std::string& what) const {
    for (size_t i = 0; i < calls.size(); ++i) {
      const int64_t rows = calls[i].ldy;
      expect_bitwise_equal(ys[i].data(), refs[i].data(), calls[i].M, rows, rows, rows, core::str_cat(what, " call ", i));
    }
  }
};

std::string name_of(WeightFormat f, int64_t rows, int64_t cols, int64_t M) {
  return core::str_cat(weight_format_name(f), " ", rows, "x", cols, " M=", M);
}

TEST(Linear, ReferenceIsWithinTheErrorBound) {
  // The oracle itself against the exact sum: validates the bound used everywhere below.
  for (WeightFormat f : kFormats) {
    const TestWeight w = make_weight(f, 33, 256, 1);
    const auto x = make_x(3, 256, 2);
    std::vector<float> y(3 * 33);
    linear_reference(w.view, x.data(), 3, 256, y.data(), 33);
    expect_close_to_exact(w.view, x.data(), 3, 256, y.data(), 33, name_of(f, 33, 256, 3) + " reference");
  }
}

TEST(Linear, WeightAtDecodesExactValues) {
  // FP8: code 0x01 is the smallest subnormal 2^-9; 0x7E is 448; 0xB8 is -1.0. Scale code 127+3 = 8.
  uint8_t fp8[4] = {0x01, 0x7E, 0xB8, 0x00};
  uint8_t fp8_scale = 130;
  WeightView w8{WeightFormat::kFP8, 1, 4, fp8, &fp8_scale, false, "fp8"};
  EXPECT_EQ(weight_at(w8, 0, 0), std::ldexp(1.0f, -9) * 8.0f);
  EXPECT_EQ(weight_at(w8, 0, 1), 448.0f * 8.0f);
  EXPECT_EQ(weight_at(w8, 0, 2), -8.0f);
  EXPECT_EQ(weight_at(w8, 0, 3), 0.0f);
  // FP4: byte 0x97 holds 6.0 (low nibble 7) then -0.5 (high nibble 9); scale 2^-1.
  std::vector<uint8_t> fp4(16, 0x97);
  uint8_t fp4_scale = 126;
  WeightView w4{WeightFormat::kFP4, 1, 32, fp4.data(), &fp4_scale, false, "fp4"};
  EXPECT_EQ(weight_at(w4, 0, 0), 3.0f);
  EXPECT_EQ(weight_at(w4, 0, 1), -0.25f);
}

// The product of every format and shape, on every SIMD target this CPU runs, against the bound.
TEST(Linear, MatchesExactSumOnEveryTarget) {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{1, 1}, {15, 3}, {16, 64}, {17, 127}, {40, 130}, {129, 256}, {64, 1000}, {150, 384}};
  const Shape fp4_shapes[] = {{1, 32}, {15, 64}, {16, 96}, {17, 160}, {129, 256}, {64, 1024}};
  const int64_t Ms[] = {1, 2, 3, 4, 5, 17, 70};
  core::ThreadPool pool(3);
  const auto targets = available_targets();
  ASSERT_FALSE(targets.empty());
  for (const SimdTarget& target : targets) {
    ScopedTarget scope(target);
    uint32_t seed = 100;
    for (WeightFormat f : kFormats) {
      const bool fp4 = f == WeightFormat::kFP4;
      const Shape* begin = fp4 ? fp4_shapes : shapes;
      const size_t count = fp4 ? std::size(fp4_shapes) : std::size(shapes);
      for (size_t i = 0; i < count; ++i) {
        const Shape s = begin[i];
        // Scales: E8M0 around 1, E8M0 up to 2^13 (FP8 then multiplies by 2^120 in two steps), or f32
        // values that are not powers of two.
        const bool f32_scales = (f == WeightFormat::kFP8 || fp4) && i % 3 == 2;
        const bool large_scales = i % 3 == 1;
        const TestWeight w = make_weight(f, s.rows, s.cols, ++seed, f32_scales, large_scales ? 128 : 118,
                                         large_scales ? 140 : 130);
        const Linear lin(w.view);
        for (int64_t M : Ms) {
          const int64_t ldx = s.cols + 3, ldy = s.rows + 5;
          const auto x = make_x(M, ldx, ++seed);
          std::vector<float> y(M * ldy, -777.0f);
          lin.forward(x.data(), M, ldx, y.data(), ldy, M % 2 ? &pool : nullptr);
          const std::string what = target.name + " " + name_of(f, s.rows, s.cols, M) +
                                   (f32_scales ? " f32-scales" : large_scales ? " large-scales" : "");
          expect_close_to_exact(w.view, x.data(), M, ldx, y.data(), ldy, what);
          // Padding of y between rows is left alone.
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = s.rows; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], -777.0f) << what;
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The medium config's shapes at decode and prefill sizes, best target only (kept small in K·N·M).
TEST(Linear, MatchesExactSumAtModelShapes) {
  struct Case {
    WeightFormat f;
    int64_t rows, cols;
  };
  const Case cases[] = {{WeightFormat::kFP8, 512, 1024},
                        {WeightFormat::kFP4, 512, 1024},
                        {WeightFormat::kFP4, 1024, 512},
                        {WeightFormat::kBF16, 640, 1024}};
  core::ThreadPool pool(2);
  uint32_t seed = 7;
  for (const Case& c : cases) {
    const TestWeight w = make_weight(c.f, c.rows, c.cols, ++seed);
    const Linear lin(w.view);
    for (int64_t M : {1, 64}) {
      const auto x = make_x(M, c.cols, ++seed);
      std::vector<float> y(M * c.rows);
      lin.forward(x.data(), M, c.cols, y.data(), c.rows, &pool);
      expect_close_to_exact(w.view, x.data(), M, c.cols, y.data(), c.rows, name_of(c.f, c.rows, c.cols, M));
    }
  }
}

// Every row count of the batched decode and of small prefill chunks (1..64: the stream schedule, then
// gemm tiles of every height and their balanced splits) on shapes that leave partial panels, partial
// tile panel groups and an odd k: within the oracle's bound, and each row bitwise the row computed alone.
TEST(Linear, EveryRowCountUpTo64WithinTheBoundAndBatchInvariant) {
  constexpr int64_t kMaxRows = 64;
  core::ThreadPool pool(3);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    uint32_t seed = 300;
    for (WeightFormat f : kFormats) {
      const int64_t rows = 83, cols = f == WeightFormat::kFP4 ? 160 : 131;
      const int64_t ldx = cols + 1, ldy = rows + 2;
      const TestWeight w = make_weight(f, rows, cols, ++seed);
      const Linear lin(w.view);
      const auto x = make_x(kMaxRows, ldx, ++seed);
      // The exact sums and their bounds (as expect_close_to_exact), once for all row counts.
      std::vector<double> exact(kMaxRows * rows), bound(kMaxRows * rows);
      for (int64_t m = 0; m < kMaxRows; ++m) {
        for (int64_t n = 0; n < rows; ++n) {
          double e = 0.0, mag = 0.0;
          for (int64_t k = 0; k < cols; ++k) {
            const double p = static_cast<double>(x[m * ldx + k]) * static_cast<double>(weight_at(w.view, n, k));
            e += p;
            mag += std::fabs(p);
          }
          exact[m * rows + n] = e;
          bound[m * rows + n] = 1.01 * static_cast<double>(cols + 1) * std::ldexp(1.0, -24) * mag + 1e-37;
        }
      }
      std::vector<float> alone(kMaxRows * rows);
      for (int64_t m = 0; m < kMaxRows; ++m) lin.forward(x.data() + m * ldx, 1, ldx, alone.data() + m * rows, rows, nullptr);
      for (int64_t M = 1; M <= kMaxRows; ++M) {
        const std::string what = target.name + " " + name_of(f, rows, cols, M);
        std::vector<float> y(M * ldy, -777.0f);
        lin.forward(x.data(), M, ldx, y.data(), ldy, M % 2 ? &pool : nullptr);
        int64_t bad = 0;
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < rows; ++n) {
            const double got = y[m * ldy + n];
            if (!(std::fabs(got - exact[m * rows + n]) <= bound[m * rows + n]) && ++bad <= 5) {
              ADD_FAILURE() << what << ": y[" << m << "][" << n << "] = " << got << ", exact " << exact[m * rows + n];
            }
          }
          for (int64_t n = rows; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], -777.0f) << what;
        }
        EXPECT_EQ(bad, 0) << what;
        expect_bitwise_equal(y.data(), alone.data(), M, rows, ldy, rows, what + " vs rows alone");
        if (HasFailure()) return;
      }
    }
  }
}

// Row m of an M-row product equals, bit for bit, the same row computed alone, in any batch and with any
// thread count, through forward, forward_rows and linear_forward_many.
TEST(Linear, BatchInvariantBitForBit) {
  const int64_t rows = 200, cols = 320, M = 37;
  std::vector<std::unique_ptr<core::ThreadPool>> pools;
  for (int t : {1, 2, 3, 4}) pools.push_back(std::make_unique<core::ThreadPool>(t));
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    for (WeightFormat f : kFormats) {
      const TestWeight w = make_weight(f, rows, cols, 11);
      const Linear lin(w.view);
      const auto x = make_x(M, cols, 12);
      std::vector<float> alone(M * rows);
      for (int64_t m = 0; m < M; ++m) lin.forward(x.data() + m * cols, 1, cols, alone.data() + m * rows, rows, nullptr);
      const std::string base = target.name + " " + weight_format_name(f);
      for (auto& pool : pools) {
        // Several batch splits: all rows, then pieces of 2, 3, 4, 5 and 17 rows (stream and gemm schedules).
        for (int64_t piece : {M, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{17}}) {
          std::vector<float> y(M * rows);
          for (int64_t m0 = 0; m0 < M; m0 += piece) {
            const int64_t mm = std::min(piece, M - m0);
            lin.forward(x.data() + m0 * cols, mm, cols, y.data() + m0 * rows, rows, pool.get());
          }
          expect_bitwise_equal(y.data(), alone.data(), M, rows, rows, rows,
                               core::str_cat(base, " threads=", pool->size(), " piece=", piece));
        }
      }
      // Output rows in uneven ranges.
      std::vector<float> y(M * rows);
      for (int64_t r0 = 0; r0 < rows; r0 += 23) lin.forward_rows(x.data(), M, cols, y.data(), rows, r0, std::min(rows, r0 + 23));
      expect_bitwise_equal(y.data(), alone.data(), M, rows, rows, rows, base + " forward_rows");
      if (HasFailure()) return;
    }
  }
}

// Rows of x far from 1 (huge, tiny, zero, with inf or NaN) against scales far from 1: the FP8 x-scaling
// and the FP4 per-row exponent must stay exact and batch invariant.
TEST(Linear, ExtremeScalesAndActivations) {
  struct Case {
    int scale_lo, scale_hi;
    float x_magnitude;
  };
  const Case cases[] = {{0, 12, 1e30f}, {1, 3, 1e20f}, {180, 200, 1e-30f}, {120, 130, 1e-40f}, {240, 246, 1e-36f}};
  core::ThreadPool pool(2);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    for (WeightFormat f : kFormats) {
      for (const Case& c : cases) {
        const int64_t rows = 40, cols = 256, M = 7;
        const TestWeight w = make_weight(f, rows, cols, 31, false, c.scale_lo, c.scale_hi);
        const Linear lin(w.view);
        auto x = make_x(M, cols, 32);
        for (int64_t k = 0; k < cols; ++k) {
          x[0 * cols + k] *= c.x_magnitude;
          x[1 * cols + k] *= (k % 2 ? c.x_magnitude : 1.0f);
          x[2 * cols + k] = 0.0f;
          x[3 * cols + k] *= c.x_magnitude * 1e-3f;
        }
        x[4 * cols + 5] = INFINITY;
        x[5 * cols + 9] = NAN;
        std::vector<float> y(M * rows), alone(M * rows);
        lin.forward(x.data(), M, cols, y.data(), rows, &pool);
        for (int64_t m = 0; m < M; ++m)
          lin.forward(x.data() + m * cols, 1, cols, alone.data() + m * rows, rows, nullptr);
        const std::string what = core::str_cat(target.name, " ", weight_format_name(f), " scales ", c.scale_lo, "..",
                                               c.scale_hi, " |x| ~", c.x_magnitude);
        expect_bitwise_equal(y.data(), alone.data(), M, rows, rows, rows, what);
        // Finite rows against the exact sum (the weights themselves may be subnormal or huge).
        for (int64_t m : {0, 1, 2, 3, 6}) {
          expect_close_to_exact(w.view, x.data() + m * cols, 1, cols, y.data() + m * rows, rows,
                                what + core::str_cat(" row ", m));
        }
        for (int64_t n = 0; n < rows; ++n) EXPECT_TRUE(std::isnan(y[5 * rows + n])) << what << " NaN row, n=" << n;
        if (HasFailure()) return;
      }
    }
  }
}

// A narrow weight with many rows of x is split over the rows of x as well as over output rows.
TEST(Linear, NarrowWeightSplitOverRowsOfXStaysInvariant) {
  const int64_t rows = 24, cols = 256, M = 130;
  core::ThreadPool pool(3);
  for (WeightFormat f : kFormats) {
    const TestWeight w = make_weight(f, rows, cols, 51);
    const Linear lin(w.view);
    const auto x = make_x(M, cols, 52);
    std::vector<float> y(M * rows), alone(M * rows);
    lin.forward(x.data(), M, cols, y.data(), rows, &pool);
    for (int64_t m = 0; m < M; ++m) lin.forward(x.data() + m * cols, 1, cols, alone.data() + m * rows, rows, nullptr);
    expect_bitwise_equal(y.data(), alone.data(), M, rows, rows, rows, weight_format_name(f));
    expect_close_to_exact(w.view, x.data(), M, cols, y.data(), rows, weight_format_name(f));
  }
}

TEST(Linear, ForwardManyEqualsSeparateForwards) {
  core::ThreadPool pool(3);
  std::vector<TestWeight> ws;
  std::vector<Linear> lins;
  uint32_t seed = 40;
  for (WeightFormat f : kFormats) {
    ws.push_back(make_weight(f, 96, 256, ++seed));
    ws.push_back(make_weight(f, 20, 64, ++seed));
  }
  for (const auto& w : ws) lins.emplace_back(w.view);
  std::vector<std::vector<float>> xs, ys, refs;
  std::vector<LinearCall> calls;
  for (size_t i = 0; i < lins.size(); ++i) {
    const int64_t M = 1 + static_cast<int64_t>(i % 3) * 4;
    xs.push_back(make_x(M, lins[i].cols(), ++seed));
    ys.emplace_back(M * lins[i].rows());
    refs.emplace_back(M * lins[i].rows());
    lins[i].forward(xs[i].data(), M, lins[i].cols(), refs[i].data(), lins[i].rows(), nullptr);
  }
  for (size_t i = 0; i < lins.size(); ++i) {
    const int64_t M = static_cast<int64_t>(xs[i].size()) / lins[i].cols();
    calls.push_back({&lins[i], xs[i].data(), M, lins[i].cols(), ys[i].data(), lins[i].rows()});
  }
  linear_forward_many(calls, &pool);
  for (size_t i = 0; i < lins.size(); ++i) {
    const int64_t M = static_cast<int64_t>(xs[i].size()) / lins[i].cols();
    expect_bitwise_equal(ys[i].data(), refs[i].data(), M, lins[i].rows(), lins[i].rows(), lins[i].rows(),
                         core::str_cat("call ", i));
  }
}

// Extra tasks (the int8 experts next to the shared expert's products) join the products' region: each
// runs exactly once, the products keep their bitwise results, and the whole is one parallel region;
// also with extra tasks alone and with a single task (inline, no region).
TEST(Linear, ForwardManyRunsExtraTasksOnceInTheSameRegion) {
  core::ThreadPool pool(3);
  uint32_t seed = 90;
  ProductBatch batch(96, 256, 1, seed);
  for (const int64_t n_extra : {int64_t{1}, int64_t{37}}) {
    for (const bool with_products : {true, false}) {
      std::vector<std::atomic<int>> ran(static_cast<size_t>(n_extra));
      for (auto& y : batch.ys) std::fill(y.begin(), y.end(), 0.0f);
      const std::span<const LinearCall> products =
          with_products ? std::span<const LinearCall>(batch.calls) : std::span<const LinearCall>();
      const uint64_t regions = pool.regions();
      linear_forward_many(products, &pool, n_extra, [&](int64_t t) { ran[static_cast<size_t>(t)].fetch_add(1); });
      const std::string what = core::str_cat("extra=", n_extra, " products=", with_products);
      EXPECT_EQ(pool.regions() - regions, with_products || n_extra > 1 ? 1u : 0u) << what;
      for (int64_t t = 0; t < n_extra; ++t) EXPECT_EQ(ran[static_cast<size_t>(t)].load(), 1) << what << " task " << t;
      if (with_products) batch.expect_results(what);
    }
  }
}

// A pool of many more threads than cores (sized for a 64+ core server): products split into more
// tasks than there are rows to share, and tasks run preempted in any order; the result must still be
// bitwise that of the calling thread alone, on every target and format, for one product and a batch.
TEST(Linear, MoreThreadsThanCoresGiveBitwiseTheSameResult) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  core::ThreadPool pool(std::clamp(4 * cores, 64, 256));
  ASSERT_GT(pool.size(), cores);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    uint32_t seed = 70;
    for (WeightFormat f : kFormats) {
      // Wide enough to split into many row tasks; narrow and tall enough to split over rows of x too.
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1040, 256}, {48, 512}}) {
        const TestWeight w = make_weight(f, rows, cols, ++seed);
        const Linear lin(w.view);
        for (int64_t M : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{150}}) {
          const auto x = make_x(M, cols, ++seed);
          std::vector<float> alone(M * rows), many(M * rows);
          lin.forward(x.data(), M, cols, alone.data(), rows, nullptr);
          lin.forward(x.data(), M, cols, many.data(), rows, &pool);
          expect_bitwise_equal(many.data(), alone.data(), M, rows, rows, rows,
                               core::str_cat(target.name, " ", name_of(f, rows, cols, M), " threads=", pool.size()));
        }
      }
      if (HasFailure()) return;
    }
    // A batch of products in one region (the MoE's experts), split over the same many threads.
    ProductBatch batch(272, 128, 3, seed);
    linear_forward_many(batch.calls, &pool);
    batch.expect_results(core::str_cat(target.name, " forward_many"));
  }
}

TEST(Linear, FmaTargetsAgreeBitForBit) {
  std::vector<SimdTarget> fma;
  for (const SimdTarget& t : available_targets())
    if (t.name == "AVX2" || t.name.rfind("AVX3", 0) == 0) fma.push_back(t);
  if (fma.size() < 2) GTEST_SKIP() << "this CPU runs only " << fma.size() << " FMA target(s)";
  for (WeightFormat f : kFormats) {
    const TestWeight w = make_weight(f, 70, 160, 5);
    const auto x = make_x(9, 160, 6);
    std::vector<float> first(9 * 70), y(9 * 70);
    for (size_t i = 0; i < fma.size(); ++i) {
      ScopedTarget scope(fma[i]);
      const Linear lin(w.view);
      lin.forward(x.data(), 9, 160, (i == 0 ? first : y).data(), 70, nullptr);
      if (i > 0) expect_bitwise_equal(y.data(), first.data(), 9, 70, 70, 70, fma[i].name + " vs " + fma[0].name);
    }
  }
}

TEST(Linear, SliceRowsGivesTheSameRows) {
  for (WeightFormat f : kFormats) {
    const TestWeight w = make_weight(f, 300, 256, 21);
    const Linear full(w.view);
    const Linear part(slice_rows(w.view, 128, 256));
    const auto x = make_x(3, 256, 22);
    std::vector<float> yf(3 * 300), yp(3 * 128);
    full.forward(x.data(), 3, 256, yf.data(), 300, nullptr);
    part.forward(x.data(), 3, 256, yp.data(), 128, nullptr);
    expect_bitwise_equal(yp.data(), yf.data() + 128, 3, 128, 128, 300, weight_format_name(f));
  }
  const TestWeight w8 = make_weight(WeightFormat::kFP8, 300, 256, 23);
  EXPECT_THROW(slice_rows(w8.view, 64, 128), core::Error);
  EXPECT_NO_THROW(slice_rows(w8.view, 256, 300));
}

// The FP8 scale block is a parameter (V4: 128x128, V4.1: 32x32): with any block that is a multiple of
// 16, on every target, at every row count of the stream and gemm schedules and for every scale mode
// (E8M0 scales moved onto x, two-step E8M0 scales, f32 scales), the product is bitwise that of the F32
// weight the test decodes itself (code x the scale of its block), the format with the same summation
// order (linear.h). Slices follow the block.
TEST(Linear, Fp8ScaleBlockIsAParameterBitwiseTheDecodedWeight) {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{83, 131}, {96, 64}};
  const int64_t blocks[] = {16, 32, 48, 128};
  core::ThreadPool pool(3);
  for (const SimdTarget& target : available_targets()) {
    ScopedTarget scope(target);
    uint32_t seed = 900;
    for (const Shape& sh : shapes) {
      for (int64_t B : blocks) {
        for (int mode = 0; mode < 3; ++mode) {
          const bool f32_scales = mode == 2;
          const TestWeight w = make_weight(WeightFormat::kFP8, sh.rows, sh.cols, ++seed, f32_scales,
                                           mode == 1 ? 128 : 118, mode == 1 ? 140 : 130, B);
          const int64_t scale_cols = (sh.cols + B - 1) / B;
          std::vector<float> decoded(sh.rows * sh.cols);
          for (int64_t n = 0; n < sh.rows; ++n) {
            for (int64_t k = 0; k < sh.cols; ++k) {
              const int64_t at = (n / B) * scale_cols + k / B;
              float scale = 0.0f;
              if (f32_scales) {
                std::memcpy(&scale, w.scales.data() + at * 4, 4);
              } else {
                scale = core::e8m0_to_float(w.scales[at]);
              }
              decoded[n * sh.cols + k] = core::fp8_e4m3_to_float(w.data[n * sh.cols + k]) * scale;
            }
          }
          WeightView f32_view{WeightFormat::kF32, sh.rows, sh.cols, decoded.data(), nullptr, false, "decoded"};
          const Linear fp8(w.view), f32(f32_view);
          for (int64_t M = 1; M <= 18; M += (M < 6 ? 1 : 6)) {
            const int64_t ldx = sh.cols + 1, ldy = sh.rows + 2;
            const auto x = make_x(M, ldx, ++seed);
            std::vector<float> y8(M * ldy), y32(M * ldy);
            fp8.forward(x.data(), M, ldx, y8.data(), ldy, M % 2 ? &pool : nullptr);
            f32.forward(x.data(), M, ldx, y32.data(), ldy, nullptr);
            expect_bitwise_equal(y8.data(), y32.data(), M, sh.rows, ldy, ldy,
                                 target.name + " block " + std::to_string(B) + " mode " + std::to_string(mode) + " " +
                                     name_of(WeightFormat::kFP8, sh.rows, sh.cols, M));
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  const TestWeight w = make_weight(WeightFormat::kFP8, 83, 64, 5, false, 118, 130, 32);
  const Linear full(w.view), part(slice_rows(w.view, 32, 83));
  const auto x = make_x(2, 64, 6);
  std::vector<float> yf(2 * 83), yp(2 * 51);
  full.forward(x.data(), 2, 64, yf.data(), 83, nullptr);
  part.forward(x.data(), 2, 64, yp.data(), 51, nullptr);
  expect_bitwise_equal(yp.data(), yf.data() + 32, 2, 51, 51, 83, "slice of 32x32 blocks");
  EXPECT_THROW(slice_rows(w.view, 16, 32), core::Error);
  TestWeight odd = make_weight(WeightFormat::kFP8, 40, 40, 7, false, 118, 130, 24);
  EXPECT_THROW(Linear{odd.view}, core::Error);  // not a multiple of 16
}

TEST(Linear, BytesKeepTheCompressedSize) {
  const TestWeight w = make_weight(WeightFormat::kFP4, 512, 1024, 3);
  const Linear lin(w.view);
  EXPECT_EQ(weight_bytes(w.view), 512 * 512 + 512 * 32);
  EXPECT_EQ(lin.bytes(), weight_bytes(w.view));
}

TEST(Linear, RejectsBadWeights) {
  TestWeight w = make_weight(WeightFormat::kFP8, 20, 40, 9);
  w.data[5 * 40 + 7] = 0xFF;
  try {
    Linear lin(w.view);
    ADD_FAILURE() << "NaN code accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("[5, 7]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'test'"), std::string::npos) << e.what();
  }
  TestWeight s = make_weight(WeightFormat::kFP4, 4, 64, 9);
  s.scales[3] = 0xFF;
  EXPECT_THROW(Linear{s.view}, core::Error);
  TestWeight odd = make_weight(WeightFormat::kFP4, 4, 64, 9);
  odd.view.cols = 48;
  EXPECT_THROW(Linear{odd.view}, core::Error);
  WeightView empty;
  EXPECT_THROW(Linear{empty}, core::Error);
  const TestWeight ok = make_weight(WeightFormat::kBF16, 4, 8, 1);
  const Linear lin(ok.view);
  std::vector<float> x(8), y(4);
  EXPECT_THROW(lin.forward(x.data(), 1, 4, y.data(), 4, nullptr), core::Error);  // ldx < cols
}

// Packed weights from 16 KiB up to 2 MiB (a MoE layer's experts) are slices of shared huge-page-advised
// chunks: consecutive ones are adjacent, each is zeroed even where a freed neighbour was written.
TEST(PackedBytes, MidSizedWeightsAreZeroedAdjacentSlicesOfAChunk) {
  constexpr int64_t kN = 300000, kStep = (kN + 63) / 64 * 64;
  {
    detail::Bytes dirty = detail::allocate_bytes(kN);
    std::memset(dirty.get(), 0xFF, kN);
  }
  detail::Bytes a = detail::allocate_bytes(kN), b = detail::allocate_bytes(kN), c = detail::allocate_bytes(kN);
  // At most one chunk change among three allocations of 300 kB in chunks of 32 MiB.
  EXPECT_TRUE(b.get() - a.get() == kStep || c.get() - b.get() == kStep);
  for (const detail::Bytes* p : {&a, &b, &c}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p->get()) % 64, 0u);
    EXPECT_TRUE(std::all_of(p->get(), p->get() + kN, [](uint8_t v) { return v == 0; }));
  }
}

// A chunk is unmapped once the arena has moved on and its last slice is freed.
TEST(PackedBytes, ChunksAreUnmappedWhenTheirSlicesAreFreed) {
  constexpr int64_t kSlice = int64_t{1} << 20;
  const int64_t before = detail::arena_chunks_mapped();
  {
    std::vector<detail::Bytes> slices;
    // Untouched: no page is faulted in, so the test costs no memory.
    for (int64_t i = 0; i < 3 * detail::kArenaChunkBytes / kSlice; ++i) {
      slices.push_back(detail::allocate_bytes(kSlice));
    }
    EXPECT_GE(detail::arena_chunks_mapped(), before + 2);
  }
  EXPECT_LE(detail::arena_chunks_mapped(), before + 1);
}

#if defined(__SANITIZE_ADDRESS__)
// The arena's slices lie side by side in one mapping, which ASan does not track by itself: a read one
// byte past a slice (into the next weight or the unused rest) and a read of a freed slice must still
// be reported.
TEST(PackedBytesDeathTest, AsanSeesPastASliceAndIntoAFreedOne) {
  constexpr int64_t kN = 20000;
  detail::Bytes a = detail::allocate_bytes(kN), b = detail::allocate_bytes(kN);
  volatile const uint8_t* pa = a.get();
  EXPECT_EQ(pa[kN - 1], 0);
  EXPECT_DEATH((void)pa[kN], "AddressSanitizer");
  uint8_t* freed = b.get();
  b.reset();
  EXPECT_DEATH((void)static_cast<volatile const uint8_t*>(freed)[kN / 2], "AddressSanitizer");
}
#endif

}  // namespace
}  // namespace dsinfer::kernels
