// The shared MoE expert stage (model/layers/experts.h) against a plain scalar loop over its definition
//   y[row] = Σ_k route[row][k] · w2_e(SwiGLU(w1_e x, w3_e x)) + w2_s(SwiGLU(w1_s x, w3_s x)),
// and bitwise independent of the batch it runs in and of the thread count (batch invariance).
#include "model/layers/experts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "core/dtypes.h"
#include "core/thread_pool.h"

namespace dsinfer::model::layers {
namespace {

constexpr int64_t kDim = 64, kInter = 64, kSharedInter = 96, kExperts = 8, kTopK = 3, kRows = 16;
constexpr float kLimit = 1.5f;  // low enough that the clamp acts on some values

// A weight held as the checkpoint would hold it (F32, or FP4 with E8M0 scales per 32 columns).
struct HeldWeight {
  std::vector<float> f32;
  std::vector<uint8_t> data, scales;
  kernels::WeightView view;
};

HeldWeight f32_weight(int64_t rows, int64_t cols, std::mt19937& rng) {
  HeldWeight w;
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  w.f32.resize(rows * cols);
  for (auto& v : w.f32) v = normal(rng);
  w.view.format = kernels::WeightFormat::kF32;
  w.view.rows = rows;
  w.view.cols = cols;
  w.view.data = w.f32.data();
  return w;
}

HeldWeight fp4_weight(int64_t rows, int64_t cols, std::mt19937& rng) {
  HeldWeight w;
  std::uniform_int_distribution<int> byte(0, 255), exponent(122, 125);
  w.data.resize(rows * cols / 2);
  for (auto& c : w.data) c = static_cast<uint8_t>(byte(rng));
  w.scales.resize(rows * cols / 32);
  for (auto& s : w.scales) s = static_cast<uint8_t>(exponent(rng));
  w.view.format = kernels::WeightFormat::kFP4;
  w.view.rows = rows;
  w.view.cols = cols;
  w.view.data = w.data.data();
  w.view.scales = w.scales.data();
  return w;
}

// An expert's weights, its exact products and (FP4 weights) its int8 products.
struct TestExpert {
  HeldWeight w1, w2, w3;
  kernels::Linear l1, l2, l3;
  kernels::Fp4Int8Linear q1, q2, q3;
  ExpertProducts products(bool int8) const {
    if (int8) return {nullptr, nullptr, nullptr, &q1, &q2, &q3};
    return {&l1, &l2, &l3, nullptr, nullptr, nullptr};
  }
};

std::unique_ptr<TestExpert> make_expert(int64_t inter, bool fp4, std::mt19937& rng) {
  auto e = std::make_unique<TestExpert>();
  auto make = [&](int64_t rows, int64_t cols) { return fp4 ? fp4_weight(rows, cols, rng) : f32_weight(rows, cols, rng); };
  e->w1 = make(inter, kDim);
  e->w3 = make(inter, kDim);
  e->w2 = make(kDim, inter);
  e->l1 = kernels::Linear(e->w1.view);
  e->l2 = kernels::Linear(e->w2.view);
  e->l3 = kernels::Linear(e->w3.view);
  if (fp4) {
    e->q1 = kernels::Fp4Int8Linear(e->w1.view);
    e->q2 = kernels::Fp4Int8Linear(e->w2.view);
    e->q3 = kernels::Fp4Int8Linear(e->w3.view);
  }
  return e;
}

struct Model {
  std::vector<std::unique_ptr<TestExpert>> routed;
  std::unique_ptr<TestExpert> shared;
  std::vector<float> x, route;
  std::vector<int32_t> chosen;
};

// fp4: FP4 routed experts (expert 0 stays F32, so a batch mixes int8 and exact products when asked).
Model make_model(bool fp4, uint32_t seed) {
  std::mt19937 rng(seed);
  Model m;
  for (int64_t e = 0; e < kExperts; ++e) m.routed.push_back(make_expert(kInter, fp4 && e > 0, rng));
  m.shared = make_expert(kSharedInter, false, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  m.x.resize(kRows * kDim);
  for (auto& v : m.x) v = normal(rng);
  std::uniform_int_distribution<int32_t> expert(0, kExperts - 1);
  std::uniform_real_distribution<float> weight(0.1f, 1.5f);
  m.chosen.resize(kRows * kTopK);
  m.route.resize(kRows * kTopK);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t k = 0; k < kTopK; ++k) {
      m.chosen[r * kTopK + k] = expert(rng);
      m.route[r * kTopK + k] = weight(rng);
    }
  }
  // A row that picks one expert twice (V4's hash layers may): both slots count, in slot order.
  m.chosen[5 * kTopK + 1] = m.chosen[5 * kTopK + 0];
  return m;
}

ExpertStage stage_of(int64_t act_block) {
  return ExpertStage{kDim, kInter, kSharedInter, kTopK, kLimit, act_block, {}};
}

std::vector<float> run(const ExpertStage& st, const Model& m, bool int8, const std::vector<int64_t>& rows,
                       core::ThreadPool& pool, ExpertScratch& scratch) {
  std::vector<ExpertProducts> experts;
  for (const auto& e : m.routed) experts.push_back(e->products(int8 && !e->q1.empty()));
  std::vector<float> x, route;
  std::vector<int32_t> chosen;
  for (int64_t r : rows) {
    x.insert(x.end(), m.x.begin() + r * kDim, m.x.begin() + (r + 1) * kDim);
    chosen.insert(chosen.end(), m.chosen.begin() + r * kTopK, m.chosen.begin() + (r + 1) * kTopK);
    route.insert(route.end(), m.route.begin() + r * kTopK, m.route.begin() + (r + 1) * kTopK);
  }
  const int64_t N = static_cast<int64_t>(rows.size());
  std::vector<float> y(N * kDim, NAN);
  experts_forward(st, experts, m.shared->products(false), x.data(), N, chosen.data(), route.data(), y.data(), scratch,
                  &pool);
  return y;
}

double w_at(const HeldWeight& w, int64_t r, int64_t c) { return kernels::weight_at(w.view, r, c); }

// In place: the values the int8 products multiply (codes times block scales, blocks of 32).
void int8_values(std::vector<float>& v) {
  const int64_t n = static_cast<int64_t>(v.size()), blocks = kernels::int8_block_count(n, 32);
  std::vector<int8_t> q(n);
  std::vector<float> scale(blocks);
  kernels::quantize_int8_blocks(v.data(), 1, n, n, 32, q.data(), n, scale.data(), blocks);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(q[i]) * scale[i / 32];
}

// The scalar oracle in double: the result and, per output, the scale of the fp32 rounding error (the
// absolute values of the terms summed, propagated through the SwiGLU to first order). round_routed: applied to the routed
// experts' inputs (x and h) as ExpertRounding::act_quant with act_quant_shared = false. int8: the experts
// with int8 products take their inputs (x and h) as the int8 codes times their block scales, the values
// their integer dots multiply exactly. *clamped counts the g / u values the SwiGLU's limit changed.
void oracle_row(const Model& m, int64_t row, bool round_routed, bool int8, std::vector<double>& y,
                std::vector<double>& mag, int64_t* clamped) {
  y.assign(kDim, 0.0);
  mag.assign(kDim, 0.0);
  auto expert = [&](const TestExpert& e, int64_t inter, double weight, bool rounded) {
    std::vector<float> xr(m.x.begin() + row * kDim, m.x.begin() + (row + 1) * kDim);
    if (rounded) {
      for (auto& v : xr) v = core::round_to_bf16(v);
    }
    const bool quantized = int8 && !e.q1.empty();
    if (quantized) int8_values(xr);
    std::vector<double> h(inter), habs(inter);
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0, gabs = 0, uabs = 0;
      for (int64_t c = 0; c < kDim; ++c) {
        g += xr[c] * w_at(e.w1, i, c);
        u += xr[c] * w_at(e.w3, i, c);
        gabs += std::fabs(xr[c] * w_at(e.w1, i, c));
        uabs += std::fabs(xr[c] * w_at(e.w3, i, c));
      }
      *clamped += (g > kLimit) + (std::fabs(u) > kLimit);
      g = std::min(g, static_cast<double>(kLimit));
      u = std::clamp(u, -static_cast<double>(kLimit), static_cast<double>(kLimit));
      h[i] = g / (1.0 + std::exp(-g)) * u * weight;
      // First order: |dh/dg| <= 1.1 |u w|, |dh/du| = |silu(g) w|, and g, u are off by at most their
      // length times 2^-24 times gabs, uabs; plus h's own magnitude for the rounding of the SwiGLU and w2.
      habs[i] = std::fabs(weight) * (1.1 * std::fabs(u) * gabs + std::fabs(g / (1.0 + std::exp(-g))) * uabs) +
                std::fabs(h[i]);
      if (rounded) h[i] = core::round_to_bf16(static_cast<float>(h[i]));
    }
    if (quantized) {
      std::vector<float> hf(h.begin(), h.end());
      int8_values(hf);
      std::copy(hf.begin(), hf.end(), h.begin());
    }
    for (int64_t c = 0; c < kDim; ++c) {
      for (int64_t i = 0; i < inter; ++i) {
        y[c] += h[i] * w_at(e.w2, c, i);
        mag[c] += habs[i] * std::fabs(w_at(e.w2, c, i));
      }
    }
  };
  for (int64_t k = 0; k < kTopK; ++k) {
    expert(*m.routed[m.chosen[row * kTopK + k]], kInter, m.route[row * kTopK + k], round_routed);
  }
  expert(*m.shared, kSharedInter, 1.0, false);
}

// Exact products: within 1e-5 times that scale of the double oracle (fp32 sums of at most 96 terms per
// product: 96 · 2^-24 ≈ 6e-6). A bf16 rounding of an input (2^-9) is far outside it.
TEST(LayersExperts, ExactProductsEqualTheScalarOracle) {
  const Model m = make_model(false, 11);
  core::ThreadPool pool(3);
  ExpertScratch scratch;
  std::vector<int64_t> rows(kRows);
  for (int64_t r = 0; r < kRows; ++r) rows[r] = r;
  for (bool round_routed : {false, true}) {
    ExpertStage st = stage_of(0);
    if (round_routed) {  // V4.1's official_at_fast_sites shape: only the routed inputs are rounded
      st.rounding.act_quant = [](float* v, int64_t n) {
        for (int64_t i = 0; i < n; ++i) v[i] = core::round_to_bf16(v[i]);
      };
      st.rounding.act_quant_shared = false;
    }
    const std::vector<float> y = run(st, m, false, rows, pool, scratch);
    int64_t clamped = 0;
    std::vector<double> ref, mag;
    for (int64_t r = 0; r < kRows; ++r) {
      oracle_row(m, r, round_routed, false, ref, mag, &clamped);
      for (int64_t c = 0; c < kDim; ++c) {
        EXPECT_NEAR(y[r * kDim + c], ref[c], 1e-5 * mag[c]) << "row " << r << " col " << c << " rounded " << round_routed;
      }
    }
    EXPECT_GT(clamped, 0);  // the limit was exercised
  }
}

// Int8 products (FP4 experts; expert 0 F32, exact): the oracle with those experts' inputs quantized as
// they are (codes times block scales), within the same fp32 bound; the exact products as above.
TEST(LayersExperts, Int8ProductsStayWithinTheQuantizationStepOfTheOracle) {
  const Model m = make_model(true, 12);
  core::ThreadPool pool(2);
  ExpertScratch scratch;
  std::vector<int64_t> rows(kRows);
  for (int64_t r = 0; r < kRows; ++r) rows[r] = r;
  const std::vector<float> y_int8 = run(stage_of(32), m, true, rows, pool, scratch);
  const std::vector<float> y_exact = run(stage_of(32), m, false, rows, pool, scratch);
  std::vector<double> ref, mag, ref_int8, mag_int8;
  int64_t clamped = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    oracle_row(m, r, false, false, ref, mag, &clamped);
    oracle_row(m, r, false, true, ref_int8, mag_int8, &clamped);
    for (int64_t c = 0; c < kDim; ++c) {
      EXPECT_NEAR(y_int8[r * kDim + c], ref_int8[c], 1e-5 * mag_int8[c]) << "row " << r << " col " << c;
      EXPECT_NEAR(y_exact[r * kDim + c], ref[c], 1e-5 * mag[c]) << "row " << r << " col " << c;
    }
  }
  EXPECT_NE(y_int8, y_exact);  // the int8 products ran
}

// A row's result is bitwise the same alone, in a batch of 16 with other rows (in another order), and on
// 1, 2 or 5 threads, for exact and int8 products; scratch reused across the runs.
TEST(LayersExperts, ARowDoesNotDependOnTheBatchOrTheThreads) {
  for (bool int8 : {false, true}) {
    const Model m = make_model(int8, 13);
    const ExpertStage st = stage_of(32);
    ExpertScratch scratch;
    std::vector<int64_t> batch(kRows), reversed(kRows);
    for (int64_t r = 0; r < kRows; ++r) {
      batch[r] = r;
      reversed[r] = kRows - 1 - r;
    }
    core::ThreadPool one(1);
    std::vector<std::vector<float>> alone;
    for (int64_t r = 0; r < kRows; ++r) alone.push_back(run(st, m, int8, {r}, one, scratch));
    for (int threads : {1, 2, 5}) {
      core::ThreadPool pool(threads);
      const std::vector<float> y = run(st, m, int8, batch, pool, scratch);
      const std::vector<float> yr = run(st, m, int8, reversed, pool, scratch);
      for (int64_t r = 0; r < kRows; ++r) {
        const std::vector<float> in_batch(y.begin() + r * kDim, y.begin() + (r + 1) * kDim);
        const std::vector<float> in_reversed(yr.begin() + (kRows - 1 - r) * kDim, yr.begin() + (kRows - r) * kDim);
        EXPECT_EQ(in_batch, alone[r]) << "row " << r << " threads " << threads << " int8 " << int8;
        EXPECT_EQ(in_reversed, alone[r]) << "row " << r << " threads " << threads << " int8 " << int8;
      }
    }
  }
}

}  // namespace
}  // namespace dsinfer::model::layers
