// Top-k, Hadamard, RoPE and SwiGLU against independent definitions (and SwiGLU's SIMD targets
// against its scalar oracle).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/targets.h"
#include "kernels/cpu/topk.h"

namespace dsinfer::kernels {
namespace {

TEST(TopK, SelectsLargestWithTiesTowardLowerIndex) {
  std::mt19937 rng(7);
  std::vector<int32_t> scratch;
  for (int64_t n : {1, 2, 5, 16, 100, 1000}) {
    for (int64_t k : {1, 2, 6, 8, 17, 512}) {
      std::vector<float> s(n);
      // Few distinct values: many ties.
      std::uniform_int_distribution<int> pick(0, 5);
      for (auto& v : s) v = static_cast<float>(pick(rng)) * 0.5f;
      std::vector<int32_t> out(std::min(k, n)), ref(std::min(k, n));
      const int64_t m = topk_indices(s.data(), n, k, out.data(), scratch);
      const int64_t mr = topk_indices_scalar(s.data(), n, k, ref.data());
      ASSERT_EQ(m, std::min(k, n));
      ASSERT_EQ(mr, m);
      EXPECT_EQ(out, ref) << "n=" << n << " k=" << k;
      ASSERT_TRUE(std::is_sorted(out.begin(), out.end()));
      // Definition: every selected element beats every unselected one in (score desc, index asc).
      std::set<int32_t> chosen(out.begin(), out.end());
      ASSERT_EQ(static_cast<int64_t>(chosen.size()), m);
      for (int32_t i : out) {
        for (int32_t j = 0; j < n; ++j) {
          if (!chosen.count(j)) {
            ASSERT_TRUE(s[i] > s[j] || (s[i] == s[j] && i < j)) << i << " vs " << j;
          }
        }
      }
    }
  }
}

TEST(TopK, NanRanksLast) {
  std::vector<float> s = {NAN, 1.0f, NAN, -5.0f};
  std::vector<int32_t> out(2), scratch;
  topk_indices(s.data(), 4, 2, out.data(), scratch);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 3}));
}

TEST(Hadamard, MatchesExplicitSylvesterMatrix) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int64_t n : {1, 2, 32, 64, 128}) {
    std::vector<float> x(n);
    for (auto& v : x) v = dist(rng);
    std::vector<float> y = x;
    hadamard_transform(y.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += ((std::popcount(static_cast<uint64_t>(i & j)) & 1) ? -1.0 : 1.0) * x[j];
      ASSERT_NEAR(y[i], acc / std::sqrt(static_cast<double>(n)), 1e-5) << "n=" << n << " i=" << i;
    }
  }
  std::vector<float> bad(3);
  EXPECT_THROW(hadamard_transform(bad.data(), 3), std::exception);
}

TEST(Rope, YarnFrequenciesMatchSpecExample) {
  // model-v4.md §2.4.1: base 160000, original 65536, beta 32/1 gives low = 15, high = 25.
  RopeSpec plain{64, 160000.0, false, 16.0, 65536, 32, 1};
  RopeSpec yarn = plain;
  yarn.yarn = true;
  const auto f0 = rope_frequencies(plain);
  const auto f1 = rope_frequencies(yarn);
  ASSERT_EQ(f0.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(f0[i], std::pow(160000.0, -2.0 * i / 64), 1e-6 * f0[i]);
    const double ramp = std::clamp((i - 15.0) / 10.0, 0.0, 1.0);
    EXPECT_NEAR(f1[i], f0[i] / 16.0 * ramp + f0[i] * (1 - ramp), 1e-6 * f0[i]) << i;
  }
  EXPECT_EQ(f1[10], f0[10]);          // below low: unscaled
  EXPECT_EQ(f1[30], f0[30] / 16.0f);  // above high: fully interpolated
}

TEST(Rope, RotatesInterleavedPairsAndInverts) {
  RopeSpec spec{8, 10000.0, false, 1, 0, 32, 1};
  const auto f = rope_frequencies(spec);
  std::vector<float> c(4), s(4);
  const int64_t pos = 37;
  rope_cos_sin(f.data(), 4, pos, c.data(), s.data());
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8};
  auto y = x;
  rope_rotate(y.data(), c.data(), s.data(), 4, false);
  for (int i = 0; i < 4; ++i) {
    const double th = static_cast<double>(static_cast<float>(pos) * f[i]);
    EXPECT_NEAR(y[2 * i], x[2 * i] * std::cos(th) - x[2 * i + 1] * std::sin(th), 1e-5);
    EXPECT_NEAR(y[2 * i + 1], x[2 * i] * std::sin(th) + x[2 * i + 1] * std::cos(th), 1e-5);
  }
  rope_rotate(y.data(), c.data(), s.data(), 4, true);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

TEST(Swiglu, EveryTargetMatchesScalarAndClamps) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.0f, 8.0f);
  const int64_t n = 300;
  std::vector<float> g(n), u(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = dist(rng);
    u[i] = dist(rng);
  }
  g[0] = -200.0f;  // exp overflow region
  g[1] = 50.0f;    // clamped to 10
  u[1] = -30.0f;   // clamped to -10
  std::vector<float> ref(n);
  swiglu_scalar(g.data(), u.data(), n, 10.0f, 0.75f, ref.data());
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::min<double>(g[i], 10.0), uc = std::clamp<double>(u[i], -10.0, 10.0);
    ASSERT_NEAR(ref[i], gc / (1 + std::exp(-gc)) * uc * 0.75, 1e-5 * (1 + std::fabs(ref[i]))) << i;
  }
  EXPECT_NEAR(ref[1], 10.0 / (1 + std::exp(-10.0)) * -10.0 * 0.75, 1e-4);
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    std::vector<float> out(n);
    swiglu(g.data(), u.data(), n, 10.0f, 0.75f, out.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << target.name << " " << i;
    swiglu(g.data(), u.data(), n, 0.0f, 1.0f, out.data());  // no clamp
    const double g1 = 50.0;
    EXPECT_NEAR(out[1], g1 / (1 + std::exp(-g1)) * -30.0, 1e-3) << target.name;
  }
}

}  // namespace
}  // namespace dsinfer::kernels
