// Every compiled SIMD target of the small vector kernels against the scalar oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/stream_mix.h"
#include "kernels/cpu/targets.h"
#include "random_data.h"
#include "kernels/cpu/vec.h"

namespace dsinfer::kernels {
namespace {

using testing::random_vec;

double rel_err(double a, double b) { return std::fabs(a - b) / std::max(1e-30, std::max(std::fabs(a), std::fabs(b))); }

TEST(KernelTargets, AtLeastOneTargetAvailable) {
  const auto targets = available_targets();
  ASSERT_FALSE(targets.empty());
  for (const auto& t : targets) EXPECT_FALSE(t.name.empty());
}

TEST(VecOps, EveryTargetMatchesScalar) {
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 31, 64, 100, 128, 513, 4096}) {
      const auto a = random_vec(n, 1 + n);
      const auto b = random_vec(n, 2 + n);
      double exact = 0;
      for (int64_t i = 0; i < n; ++i) exact += static_cast<double>(a[i]) * b[i];
      double mag = 0;
      for (int64_t i = 0; i < n; ++i) mag += std::fabs(static_cast<double>(a[i]) * b[i]);
      EXPECT_NEAR(dot(a.data(), b.data(), n), dot_scalar(a.data(), b.data(), n), 1e-5 * mag + 1e-30)
          << target.name << " n=" << n;
      EXPECT_NEAR(dot(a.data(), b.data(), n), exact, 1e-5 * mag) << target.name << " n=" << n;
      EXPECT_LT(rel_err(sum_squares(a.data(), n), sum_squares_scalar(a.data(), n)), 1e-5) << target.name;

      std::vector<float> y1 = b, y2 = b;
      axpy(0.37f, a.data(), y1.data(), n);
      axpy_scalar(0.37f, a.data(), y2.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y1[i], y2[i], 1e-6f * (1 + std::fabs(y2[i]))) << target.name;
      scale(-1.5f, a.data(), y1.data(), n);
      scale_scalar(-1.5f, a.data(), y2.data(), n);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y1[i], y2[i]) << target.name;  // one rounding either way
    }
  }
}

// The first index of the maximum, ties and NaNs included, on every target: the scalar loop's answer.
TEST(VecOps, ArgmaxIsTheFirstLargestOnEveryTarget) {
  std::mt19937 rng(9);
  for (int64_t n : {1, 2, 15, 16, 17, 33, 1000, 129280}) {
    for (int variant = 0; variant < 6; ++variant) {
      auto x = random_vec(n, 100 + n + variant);
      if (variant == 1) std::sort(x.begin(), x.end());  // the best moves in every block
      if (variant == 2) std::fill(x.begin(), x.end(), 0.25f);  // all tied: index 0
      if (variant == 3 && n > 3) x[n - 1] = x[n / 2] = x[1] = 9.0f;  // ties: the first of them
      if (variant == 4) x[rng() % n] = std::nanf("");  // a NaN never wins
      if (variant == 5) x[0] = std::nanf("");  // a NaN first is kept
      const int64_t want = argmax_first_scalar(x.data(), n);
      if (variant == 2 || variant == 5) {
        ASSERT_EQ(want, 0);
      }
      if (variant == 3 && n > 3) {
        ASSERT_EQ(want, 1);
      }
      for (const auto& target : available_targets()) {
        ScopedTarget scope(target);
        ASSERT_EQ(argmax_first(x.data(), n), want) << target.name << " n=" << n << " variant " << variant;
      }
    }
  }
}

TEST(RmsNorm, EveryTargetMatchesScalarAndDefinition) {
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    for (int64_t n : {1, 5, 64, 128, 256, 1000}) {
      const auto x = random_vec(n, 10 + n, 3.0f);
      const auto w = random_vec(n, 20 + n);
      std::vector<float> y(n), ys(n);
      rmsnorm(x.data(), w.data(), n, 1e-6f, y.data());
      rmsnorm_scalar(x.data(), w.data(), n, 1e-6f, ys.data());
      double ms = 0;
      for (float v : x) ms += static_cast<double>(v) * v;
      const double inv = 1.0 / std::sqrt(ms / n + 1e-6);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(y[i], ys[i], 1e-5 * (std::fabs(ys[i]) + 1e-3)) << target.name;
        ASSERT_NEAR(y[i], x[i] * inv * w[i], 1e-5 * (std::fabs(x[i] * inv * w[i]) + 1e-3)) << target.name;
      }
      rmsnorm(x.data(), nullptr, n, 1e-6f, y.data());  // scale-free
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i] * inv, 1e-5 * (std::fabs(x[i] * inv) + 1e-3));
    }
  }
}

TEST(StreamMix, EveryTargetMatchesScalar) {
  const int64_t hc = 4;
  for (const auto& target : available_targets()) {
    ScopedTarget scope(target);
    for (int64_t d : {1, 9, 64, 256, 1027}) {
      const auto x = random_vec(hc * d, 30 + d);
      const auto f = random_vec(d, 40 + d);
      const auto w = random_vec(hc, 50 + d);
      const auto post = random_vec(hc, 60 + d);
      const auto comb = random_vec(hc * hc, 70 + d);
      std::vector<float> y(d), ys(d), o(hc * d), os(hc * d);
      hc_combine(x.data(), w.data(), hc, d, y.data());
      hc_combine_scalar(x.data(), w.data(), hc, d, ys.data());
      for (int64_t c = 0; c < d; ++c) {
        double exact = 0;
        for (int j = 0; j < hc; ++j) exact += static_cast<double>(w[j]) * x[j * d + c];
        ASSERT_NEAR(y[c], ys[c], 1e-5) << target.name;
        ASSERT_NEAR(ys[c], exact, 1e-5);
      }
      hc_expand(f.data(), x.data(), post.data(), comb.data(), hc, d, o.data());
      hc_expand_scalar(f.data(), x.data(), post.data(), comb.data(), hc, d, os.data());
      for (int64_t k = 0; k < hc; ++k) {
        for (int64_t c = 0; c < d; ++c) {
          // Independent definition: destination k takes Σ_j comb[j][k] · x[j] (first index contracted).
          double exact = static_cast<double>(post[k]) * f[c];
          for (int j = 0; j < hc; ++j) exact += static_cast<double>(comb[j * hc + k]) * x[j * d + c];
          ASSERT_NEAR(o[k * d + c], os[k * d + c], 1e-5) << target.name;
          ASSERT_NEAR(os[k * d + c], exact, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsinfer::kernels
