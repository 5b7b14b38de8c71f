#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/qdq.h"
#include "model/layers/router.h"
#include "model/layers/select.h"

namespace dsinfer::model::deepseek_v41::detail {

// double_accumulation: y [n, d] of an expert (or the shared one) on rows x [n, d], each row's SwiGLU
// scaled by its weight, in double as the float64 reference.
Vec Prefill::expert_double(const std::string& x, const Vec& rows, int64_t n, const std::vector<double>& weight) {
  const Lin &w1 = w_.linear(x + "w1"), &w2 = w_.linear(x + "w2"), &w3 = w_.linear(x + "w3");
  const int64_t I = w1.rows;
  Vec y(static_cast<size_t>(n * d_));
  pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    std::vector<double> h(static_cast<size_t>(I));
    const double lim = c_.swiglu_limit;
    for (int64_t i = b; i < e; ++i) {
      const float* xi = rows.data() + i * d_;
      for (int64_t k = 0; k < I; ++k) {
        double g = dot(xi, w1.row(k), w1.cols), u = dot(xi, w3.row(k), w3.cols);
        if (lim > 0) {
          u = std::clamp(u, -lim, lim);
          g = std::min(g, lim);
        }
        h[k] = static_cast<float>(weight[i] * (g / (1.0 + std::exp(-g))) * u);
      }
      for (int64_t r = 0; r < w2.rows; ++r) {
        double acc = 0;
        for (int64_t k = 0; k < I; ++k) acc += h[k] * w2.row(r)[k];
        y[i * d_ + r] = static_cast<float>(acc);
      }
    }
  });
  return y;
}

// An expert's three prepared linears as the shared expert stage takes them (int8 products when the
// routed FP4 experts run them, --numerics fast). *qdq: the input QDQ block of official_at_fast_sites.
layers::ExpertProducts Prefill::expert_products(const std::string& x, int64_t* qdq) const {
  const Lin &w1 = w_.linear(x + "w1"), &w2 = w_.linear(x + "w2"), &w3 = w_.linear(x + "w3");
  *qdq = w1.qdq_block;
  DSINFER_CHECK(w1.int8.empty() == w2.int8.empty() && w1.int8.empty() == w3.int8.empty() && w2.qdq_block == *qdq &&
                    w3.qdq_block == *qdq,
                "V4.1 prefill: the products of '", x, "' differ in kind");
  if (!w1.int8.empty()) return {nullptr, nullptr, nullptr, &w1.int8, &w2.int8, &w3.int8};
  DSINFER_CHECK(!w1.fast.empty() && !w2.fast.empty() && !w3.fast.empty(), "V4.1 prefill: '", x,
                "' has no fp32 products");
  return {&w1.fast, &w2.fast, &w3.fast, nullptr, nullptr, nullptr};
}

// §2.11 (text only: gate.bias, never bias_vl).
Vec Prefill::moe(const std::string& p, const Vec& f, int64_t k) {
  const Lin& gate = w_.linear(p + "gate");
  const Vec bias = w_.vec(p + "gate.bias");
  const int64_t E = gate.rows;
  const Vec logits = opt_.double_accumulation ? Vec() : matmul(pool_, f, T_, gate);
  std::vector<std::vector<int64_t>> sel(static_cast<size_t>(T_));
  std::vector<std::vector<double>> wt(static_cast<size_t>(T_));
  // V4.1's variant of the shared router: gate_temp, and the renormalisation only with norm_topk_prob
  // and more than one expert, over the sum + 1e-20.
  const layers::RouterSpec spec{c_.gate_temp, c_.norm_topk_prob && k > 1, 1e-20, c_.routed_scaling_factor};
  for (int64_t t = 0; t < T_; ++t) {
    std::vector<double> sig(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      sig[e] = logits.empty() ? dot(f.data() + t * d_, gate.row(e), d_) : logits[t * E + e];
    layers::router_scores(sig.data(), E, spec);
    sel[t].resize(static_cast<size_t>(k));
    const int64_t got = layers::select_experts(sig.data(), bias.data(), E, k, layers::SelectOrder::kByRank,
                                               biased.data(), sel[t].data());
    sel[t].resize(static_cast<size_t>(got));
    wt[t].resize(sel[t].size());
    layers::route_weights(sig.data(), sel[t].data(), static_cast<int64_t>(sel[t].size()), spec, wt[t].data());
  }
  if (!opt_.double_accumulation) return moe_shared_stage(p, f, sel, wt, E);
  std::vector<double> acc(static_cast<size_t>(T_ * d_), 0.0);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> ts;
    std::vector<double> weight;
    for (int64_t t = 0; t < T_; ++t) {
      for (size_t s = 0; s < sel[t].size(); ++s) {
        if (sel[t][s] == e) {
          ts.push_back(t);
          weight.push_back(wt[t][s]);
        }
      }
    }
    if (ts.empty()) continue;
    const int64_t n = static_cast<int64_t>(ts.size());
    Vec rows(static_cast<size_t>(n * d_));
    for (int64_t i = 0; i < n; ++i) std::copy_n(f.data() + ts[i] * d_, d_, rows.data() + i * d_);
    const Vec out = expert_double(core::str_cat(p, "experts.", e, "."), rows, n, weight);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < d_; ++c) acc[ts[i] * d_ + c] += out[i * d_ + c];
    }
  }
  const Vec shared = expert_double(p + "shared_experts.", f, T_, std::vector<double>(static_cast<size_t>(T_), 1.0));
  Vec y(static_cast<size_t>(T_ * d_));
  for (int64_t i = 0; i < T_ * d_; ++i) y[i] = static_cast<float>(acc[i] + shared[i]);
  return y;
}

// The fp32 products (exact or fast) on the expert stage shared with V4 (model/layers/experts.h): all
// rows of an expert in one product, every active expert's and the shared expert's w1/w3 in one parallel
// region, the routed outputs summed in fp32 in ascending expert id, then the shared one.
Vec Prefill::moe_shared_stage(const std::string& p, const Vec& f, const std::vector<std::vector<int64_t>>& sel,
                              const std::vector<std::vector<double>>& wt, int64_t E) {
  const int64_t K = sel.empty() ? 0 : static_cast<int64_t>(sel[0].size());
  // The small per-expert arrays are kept between calls by the thread; the stage's buffers by this
  // sequence or batch context with its other chunk buffers (experts_, given back after a long chunk:
  // keep_buffers).
  thread_local std::vector<layers::ExpertProducts> experts;
  thread_local std::vector<int32_t> chosen;
  thread_local std::vector<float> route;
  layers::ExpertScratch& scratch = experts_;
  experts.assign(static_cast<size_t>(E), layers::ExpertProducts{});
  chosen.resize(static_cast<size_t>(T_ * K));
  route.resize(static_cast<size_t>(T_ * K));
  int64_t routed_qdq = -1, qdq = 0, act_block = 0, inter = 0;
  for (int64_t t = 0; t < T_; ++t) {
    DSINFER_CHECK(static_cast<int64_t>(sel[t].size()) == K, "V4.1 prefill: rows chose different expert counts");
    for (int64_t s = 0; s < K; ++s) {
      const int64_t e = sel[t][s];
      chosen[t * K + s] = static_cast<int32_t>(e);
      route[t * K + s] = static_cast<float>(wt[t][s]);  // as the SwiGLU took it
      if (experts[e].w1 != nullptr || experts[e].w1_int8 != nullptr) continue;
      const std::string x = core::str_cat(p, "experts.", e, ".");
      experts[e] = expert_products(x, &qdq);
      DSINFER_CHECK(routed_qdq < 0 || routed_qdq == qdq, "V4.1 prefill: routed experts with different QDQ");
      routed_qdq = qdq;
      const Lin& w1 = w_.linear(x + "w1");
      DSINFER_CHECK(inter == 0 || inter == w1.rows, "V4.1 prefill: routed experts of different widths");
      inter = w1.rows;
      if (experts[e].int8()) act_block = w1.act_block;
    }
  }
  int64_t shared_qdq = 0;
  const layers::ExpertProducts shared = expert_products(p + "shared_experts.", &shared_qdq);
  DSINFER_CHECK(shared_qdq == 0, "V4.1 prefill: the shared expert's inputs are never QDQ'd");
  layers::ExpertStage stage{d_, inter, shared.w1->rows(), K, static_cast<float>(c_.swiglu_limit), act_block, {}};
  if (routed_qdq > 0) {
    // official_at_fast_sites: the routed experts' inputs FP8-QDQ'd per block, as matmul_into does.
    stage.rounding.act_quant = [routed_qdq](float* v, int64_t n) { kernels::fp8_block_qdq(v, n, routed_qdq); };
    stage.rounding.act_quant_shared = false;
  }
  Vec y(static_cast<size_t>(T_ * d_));
  layers::experts_forward(stage, experts, shared, f.data(), T_, chosen.data(), route.data(), y.data(), scratch, &pool_);
  return y;
}

}  // namespace dsinfer::model::deepseek_v41::detail
