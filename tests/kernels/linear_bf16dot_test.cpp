// Bf16DotLinear (BF16 weights × bf16-rounded activations, vdpbf16ps): the oracle's order on a hand-made
// case, every compiled target and the hardware path bitwise equal to the oracle, batch invariance, and
// a Linear built with Bf16Products::kBf16Dot (the fast compressors) giving the same bits however it splits.
#include "kernels/cpu/linear_bf16dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/targets.h"

namespace dsinfer::kernels {
namespace {

struct Bf16Weight {
  WeightView view;
  std::vector<uint16_t> data;
};

Bf16Weight make_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Bf16Weight t;
  t.data.resize(rows * cols);
  for (auto& v : t.data) v = core::float_to_bf16(normal(rng));
  t.view = WeightView{WeightFormat::kBF16, rows, cols, t.data.data(), nullptr, false, "test"};
  return t;
}

TEST(Bf16DotLinear, OracleAddsTheOddElementOfEachPairFirst) {
  // W = [1, 1, 1, 1], x = [1, 2^24, 1, -2^24]: odd first gives 2^24, 2^24 (+1 lost to rounding), 0, 1;
  // even first would give 1, 2^24, 2^24, 0.
  std::vector<uint16_t> w(4, core::float_to_bf16(1.0f));
  const WeightView v{WeightFormat::kBF16, 1, 4, w.data(), nullptr, false, "hand"};
  const float x[4] = {1.0f, 16777216.0f, 1.0f, -16777216.0f};
  float y = -1.0f;
  bf16dot_reference(v, x, 1, 4, &y, 1);
  EXPECT_EQ(y, 1.0f);
  const Bf16DotLinear lin(v);
  float z = -1.0f;
  lin.forward(x, 1, 4, &z, 1);
  EXPECT_EQ(z, 1.0f) << "the best target of this CPU";
}

TEST(Bf16DotLinear, EveryTargetAndTheHardwarePathEqualTheOracleBitwise) {
  // M = 6: one pass of each tile shape; 8, 11 and 21 rows: passes that prefetch the next group of
  // panels, two or one lines a step (panel groups of 4 and 1, row groups of 4 and 1).
  for (const int64_t M : {int64_t{6}, int64_t{8}, int64_t{11}, int64_t{21}}) {
    for (const int64_t cols : {int64_t{64}, int64_t{67}}) {
      SCOPED_TRACE(testing::Message() << "M " << M);
      constexpr int64_t rows = 150;
      const Bf16Weight w = make_bf16(rows, cols, static_cast<uint32_t>(cols));
      std::mt19937 rng(3);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int64_t ldx = cols + 3, ldy = rows + 1;
      std::vector<float> x(M * ldx);
      for (auto& v : x) v = normal(rng);
      std::vector<float> want(M * ldy, 0.0f);
      bf16dot_reference(w.view, x.data(), M, ldx, want.data(), ldy);
      const Bf16DotLinear lin(w.view);
      for (const SimdTarget& target : available_targets()) {
        ScopedTarget scope(target);
        for (const bool hw : {true, false}) {
          detail::set_bf16dot_hw_allowed(hw);
          std::vector<float> got(M * ldy, 0.0f);
          lin.forward(x.data(), M, ldx, got.data(), ldy);
          int bad = 0;
          for (size_t i = 0; i < got.size(); ++i)
            if (std::memcmp(&got[i], &want[i], 4) != 0 && ++bad <= 3)
              ADD_FAILURE() << target.name << (hw ? " hw" : " scalar") << " cols " << cols << " [" << i << "] "
                            << got[i] << " vs " << want[i];
          EXPECT_EQ(bad, 0);
        }
        detail::set_bf16dot_hw_allowed(true);
      }
      // Batch invariance: each row alone gives its row of the batch.
      std::vector<float> all(M * ldy, 0.0f);
      lin.forward(x.data(), M, ldx, all.data(), ldy);
      for (int64_t m = 0; m < M; ++m) {
        std::vector<float> one(rows);
        lin.forward(x.data() + m * ldx, 1, ldx, one.data(), rows);
        EXPECT_EQ(std::memcmp(one.data(), all.data() + m * ldy, rows * 4), 0) << m;
      }
      // Split over more threads than this machine has cores.
      core::ThreadPool pool(5);
      std::vector<float> split(M * ldy, 0.0f);
      lin.forward(x.data(), M, ldx, split.data(), ldy, &pool);
      EXPECT_EQ(std::memcmp(split.data(), all.data(), all.size() * 4), 0);
    }
  }
}

TEST(Bf16DotLinear, ALinearOfBf16ProductsIsTheOracleInEverySplit) {
  // 300 rows: whole 16-row panels and a partial one; M = 16 and 40 rows (one and several passes).
  constexpr int64_t rows = 300, cols = 96;
  const Bf16Weight w = make_bf16(rows, cols, 11);
  const Linear lin(w.view, Fp8Products::kBf16Dot, Bf16Products::kBf16Dot);
  EXPECT_TRUE(lin.bf16_dot());
  EXPECT_EQ(lin.bytes(), 19 * 48 * 16 * 4) << "19 panels of 48 pairs of 16 u32 lanes";
  EXPECT_FALSE(Linear(w.view).bf16_dot()) << "exact unless asked for";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t M : {int64_t{1}, int64_t{16}, int64_t{40}}) {
    std::vector<float> x(M * cols);
    for (auto& v : x) v = normal(rng);
    std::vector<float> want(M * rows), got(M * rows, 0.0f), rows_got(M * rows, 0.0f), many(M * rows, 0.0f);
    bf16dot_reference(w.view, x.data(), M, cols, want.data(), rows);
    core::ThreadPool pool(5);  // more threads than this machine has cores: row splits
    lin.forward(x.data(), M, cols, got.data(), rows, &pool);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "M " << M;
    lin.forward_rows(x.data(), M, cols, rows_got.data(), rows, 32, 288);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < rows; ++n)
        ASSERT_EQ(rows_got[m * rows + n], n >= 32 && n < 288 ? want[m * rows + n] : 0.0f) << m << " " << n;
    const LinearCall calls[] = {{&lin, x.data(), M, cols, many.data(), rows}};
    linear_forward_many(calls, &pool);
    EXPECT_EQ(std::memcmp(many.data(), want.data(), many.size() * 4), 0) << "M " << M;
  }
}

}  // namespace
}  // namespace dsinfer::kernels
