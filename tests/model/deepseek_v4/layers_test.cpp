// Properties of the small layer pieces against their definitions (model-v4.md §2.3, §2.11).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/deepseek_v4/mhc.h"
#include "model/deepseek_v4/moe.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

// float64 Sinkhorn exactly as §2.3.1 step 5 writes it.
std::vector<double> sinkhorn_f64(std::vector<double> c, int hc, int iters, double eps) {
  for (int j = 0; j < hc; ++j) {
    double m = -1e300, z = 0;
    for (int k = 0; k < hc; ++k) m = std::max(m, c[j * hc + k]);
    for (int k = 0; k < hc; ++k) z += std::exp(c[j * hc + k] - m);
    for (int k = 0; k < hc; ++k) c[j * hc + k] = std::exp(c[j * hc + k] - m) / z + eps;
  }
  auto cols = [&] {
    for (int k = 0; k < hc; ++k) {
      double s = 0;
      for (int j = 0; j < hc; ++j) s += c[j * hc + k];
      for (int j = 0; j < hc; ++j) c[j * hc + k] /= s + eps;
    }
  };
  cols();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      double s = 0;
      for (int k = 0; k < hc; ++k) s += c[j * hc + k];
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= s + eps;
    }
    cols();
  }
  return c;
}

TEST(V4Sinkhorn, MatchesDefinitionAndIsNearlyDoublyStochastic) {
  std::mt19937 rng(4);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const int hc = 4;
    std::vector<float> c(hc * hc);
    for (auto& v : c) v = dist(rng);
    std::vector<double> cd(c.begin(), c.end());
    const auto ref = sinkhorn_f64(cd, hc, 20, 1e-6);
    sinkhorn(c.data(), hc, 20, 1e-6f);
    for (int i = 0; i < hc * hc; ++i) {
      ASSERT_NEAR(c[i], ref[i], 1e-5) << i;
      ASSERT_GE(c[i], 0.0f);
    }
    for (int k = 0; k < hc; ++k) {
      double col = 0;
      for (int j = 0; j < hc; ++j) col += c[j * hc + k];
      EXPECT_NEAR(col, 1.0, 1e-4);  // last normalisation is over columns
    }
    for (int j = 0; j < hc; ++j) {
      double row = 0;
      for (int k = 0; k < hc; ++k) row += c[j * hc + k];
      EXPECT_NEAR(row, 1.0, 2e-2);  // rows converge after 20 iterations
    }
  }
  // One iteration: only the row softmax (+eps) and one column normalisation.
  std::vector<float> c = {0, 1, 2, 3, 1, 1, 1, 1, -2, 0, 2, 4, 0, 0, 0, 9};
  const auto ref = sinkhorn_f64(std::vector<double>(c.begin(), c.end()), 4, 1, 1e-6);
  sinkhorn(c.data(), 4, 1, 1e-6f);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(c[i], ref[i], 1e-6);
}

TEST(V4Router, SqrtSoftplusMatchesDefinition) {
  for (double x : {-50.0, -5.0, -0.3, 0.0, 0.7, 3.0, 19.0, 25.0, 80.0}) {
    const double ref = std::sqrt(std::log1p(std::exp(x)));
    EXPECT_NEAR(sqrt_softplus(static_cast<float>(x)), ref, 1e-6 * std::max(1.0, ref)) << x;
  }
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
