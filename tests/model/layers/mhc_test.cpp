// The shared mHC pieces against their definitions (model-v4.md §2.3.1), in both scalars: double (V4.1's
// glue) bit for bit, float (V4's) within float rounding.
#include "model/layers/mhc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace dsinfer::model::layers {
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

double sigmoid_f64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(LayersSinkhorn, MatchesDefinitionAndIsNearlyDoublyStochastic) {
  std::mt19937 rng(4);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int trial = 0; trial < 50; ++trial) {
    const int hc = 4;
    std::vector<float> c(hc * hc);
    for (auto& v : c) v = dist(rng);
    std::vector<double> cd(c.begin(), c.end());
    const auto ref = sinkhorn_f64(cd, hc, 20, 1e-6);
    sinkhorn(c.data(), hc, 20, 1e-6f);
    sinkhorn(cd.data(), hc, 20, 1e-6);
    for (int i = 0; i < hc * hc; ++i) {
      ASSERT_EQ(cd[i], ref[i]) << i;  // double: the definition's operations, in its order
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

TEST(LayersHc, CoefficientsFollowTheDefinitionInEitherScalar) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  for (int hc : {1, 2, 4}) {
    const int mixes = (2 + hc) * hc;
    std::vector<float> mf(mixes), base(mixes), scale(3);
    for (auto& v : mf) v = dist(rng);
    for (auto& v : base) v = dist(rng);
    for (auto& v : scale) v = dist(rng);
    std::vector<double> md(mf.begin(), mf.end());
    // The definition in double.
    std::vector<double> pre(hc), post(hc), comb(hc * hc);
    for (int j = 0; j < hc; ++j) {
      pre[j] = sigmoid_f64(md[j] * scale[0] + base[j]) + 1e-6;
      post[j] = 2 * sigmoid_f64(md[hc + j] * scale[1] + base[hc + j]);
    }
    for (int i = 0; i < hc * hc; ++i) comb[i] = md[2 * hc + i] * scale[2] + base[2 * hc + i];
    comb = sinkhorn_f64(comb, hc, 20, 1e-6);

    std::vector<double> pd(hc), qd(hc), cd(hc * hc);
    hc_coefficients(md.data(), scale.data(), base.data(), hc, 20, 1e-6, pd.data(), qd.data(), cd.data());
    std::vector<float> pf(hc), qf(hc), cf(hc * hc);
    hc_coefficients(mf.data(), scale.data(), base.data(), hc, 20, 1e-6f, pf.data(), qf.data(), cf.data());
    for (int j = 0; j < hc; ++j) {
      EXPECT_EQ(pd[j], pre[j]) << hc << " " << j;
      EXPECT_EQ(qd[j], post[j]) << hc << " " << j;
      EXPECT_NEAR(pf[j], pre[j], 1e-6) << hc << " " << j;
      EXPECT_NEAR(qf[j], post[j], 2e-6) << hc << " " << j;
    }
    for (int i = 0; i < hc * hc; ++i) {
      EXPECT_EQ(cd[i], comb[i]) << hc << " " << i;
      EXPECT_NEAR(cf[i], comb[i], 1e-5) << hc << " " << i;
    }
  }
}

}  // namespace
}  // namespace dsinfer::model::layers
