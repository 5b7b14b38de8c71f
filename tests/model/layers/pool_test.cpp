// The shared compressor pooling against its definition (model-v4.md §2.6, model-v41.md §2.6) in both
// scalars and both rounding orders (V4: softmax weights first, in float; V4.1: the weighted sum over
// the sum of the exponentials, in double).
#include "model/layers/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace dsinfer::model::layers {
namespace {

// Deterministic values in [-amp, amp) (an LCG: the test needs no distribution, only varied inputs).
std::vector<float> lcg_values(int64_t n, uint32_t seed, float amp) {
  std::vector<float> v(n);
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = amp * (static_cast<float>(seed >> 8) / 8388608.0f - 1.0f);
  }
  return v;
}

struct Candidates {
  std::vector<float> v, s;
  std::vector<const float*> vp, sp;
  Candidates(int64_t n, int64_t dim, uint32_t seed)
      : v(lcg_values(n * dim, seed, 1.0f)), s(lcg_values(n * dim, seed + 1, 2.0f)) {}
  void point(int64_t n, int64_t dim) {
    vp.clear();
    sp.clear();
    for (int64_t t = 0; t < n; ++t) {
      vp.push_back(v.data() + t * dim);
      sp.push_back(s.data() + t * dim);
    }
  }
};

TEST(LayersPool, BothOrdersMatchTheDefinitionAndSkipMinusInfinity) {
  const int64_t dim = 9, n = 8;  // V4's overlap mode at ratio 4 pools 2 · 4 candidates
  Candidates c(n, dim, 21);
  for (int64_t ch = 0; ch < dim; ch += 2) c.s[0 * dim + ch] = -INFINITY;  // first candidate absent on even channels
  c.point(n, dim);
  for (PoolOrder order : {PoolOrder::kSoftmaxFirst, PoolOrder::kDivideLast}) {
    std::vector<float> of(dim), od(dim);
    std::vector<float> sf(softmax_pool_scratch(n, dim));
    std::vector<double> sd(softmax_pool_scratch(n, dim));
    softmax_pool(c.vp.data(), c.sp.data(), n, dim, order, of.data(), sf.data());
    softmax_pool(c.vp.data(), c.sp.data(), n, dim, order, od.data(), sd.data());
    for (int64_t ch = 0; ch < dim; ++ch) {
      double m = -INFINITY, z = 0, acc = 0;
      for (int64_t t = 0; t < n; ++t) m = std::max(m, static_cast<double>(c.s[t * dim + ch]));
      for (int64_t t = 0; t < n; ++t) z += std::exp(c.s[t * dim + ch] - m);
      for (int64_t t = 0; t < n; ++t) acc += std::exp(c.s[t * dim + ch] - m) / z * c.v[t * dim + ch];
      EXPECT_NEAR(of[ch], acc, 1e-6) << ch;
      EXPECT_NEAR(od[ch], acc, 1e-7) << ch;
    }
  }
}

TEST(LayersPool, DivideLastIsV41sPairFormulaBitForBit) {
  // V4.1's ratio-2 entry: (e0·u0 + e1·u1) / (e0 + e1) in double with e_i = exp(s_i − max(s0, s1)).
  const int64_t dim = 33;
  Candidates c(2, dim, 5);
  c.v[3] = -0.0f;  // a signed zero in both candidates: the numerator must stay −0 (0 + −0 is +0)
  c.v[dim + 3] = -0.0f;
  c.point(2, dim);
  std::vector<float> out(dim);
  std::vector<double> scratch(softmax_pool_scratch(2, dim));
  softmax_pool(c.vp.data(), c.sp.data(), 2, dim, PoolOrder::kDivideLast, out.data(), scratch.data());
  for (int64_t ch = 0; ch < dim; ++ch) {
    const double s0 = c.s[ch], s1 = c.s[dim + ch];
    const double mx = std::max(s0, s1), e0 = std::exp(s0 - mx), e1 = std::exp(s1 - mx);
    const float want = static_cast<float>((e0 * c.v[ch] + e1 * c.v[dim + ch]) / (e0 + e1));
    EXPECT_EQ(out[ch], want) << ch;
    EXPECT_EQ(std::signbit(out[ch]), std::signbit(want)) << ch;
  }
  EXPECT_TRUE(std::signbit(out[3]));
}

TEST(LayersPool, SoftmaxFirstIsV4sFloatOrderBitForBit) {
  // V4's reference order in float: the softmax weight of each candidate, then the weighted sum from 0.
  const int64_t dim = 17, n = 4;
  Candidates c(n, dim, 9);
  c.point(n, dim);
  std::vector<float> out(dim), scratch(softmax_pool_scratch(n, dim));
  softmax_pool(c.vp.data(), c.sp.data(), n, dim, PoolOrder::kSoftmaxFirst, out.data(), scratch.data());
  for (int64_t ch = 0; ch < dim; ++ch) {
    float m = -std::numeric_limits<float>::infinity(), z = 0.0f, acc = 0.0f;
    for (int64_t t = 0; t < n; ++t) m = std::max(m, c.s[t * dim + ch]);
    for (int64_t t = 0; t < n; ++t) z += std::exp(c.s[t * dim + ch] - m);
    for (int64_t t = 0; t < n; ++t) acc += (std::exp(c.s[t * dim + ch] - m) / z) * c.v[t * dim + ch];
    EXPECT_EQ(out[ch], acc) << ch;
  }
}

TEST(LayersPool, EqualScoresAverageAndOneCandidateIsItself) {
  const int64_t dim = 5;
  const std::vector<float> a = {1.0f, -2.0f, 0.5f, 3.0f, -0.25f}, b = {3.0f, 2.0f, -0.5f, 1.0f, 0.25f};
  const std::vector<float> s(dim, 0.75f);
  const float* vp[2] = {a.data(), b.data()};
  const float* sp[2] = {s.data(), s.data()};
  for (PoolOrder order : {PoolOrder::kSoftmaxFirst, PoolOrder::kDivideLast}) {
    std::vector<float> out(dim);
    std::vector<double> scratch(softmax_pool_scratch(2, dim));
    softmax_pool(vp, sp, 2, dim, order, out.data(), scratch.data());
    for (int64_t ch = 0; ch < dim; ++ch) EXPECT_EQ(out[ch], (a[ch] + b[ch]) / 2) << ch;
    softmax_pool(vp, sp, 1, dim, order, out.data(), scratch.data());
    for (int64_t ch = 0; ch < dim; ++ch) EXPECT_EQ(out[ch], a[ch]) << ch;
  }
}

}  // namespace
}  // namespace dsinfer::model::layers
