#include "model/deepseek_v4/moe.h"

#include <algorithm>
#include <vector>

#include "model/layers/experts.h"
#include "model/layers/router.h"
#include "model/layers/select.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

layers::ExpertProducts products(const ExpertWeights& w) {
  if (w.int8()) return {nullptr, nullptr, nullptr, &w.w1_int8, &w.w2_int8, &w.w3_int8};
  return {&w.w1, &w.w2, &w.w3, nullptr, nullptr, nullptr};
}

}  // namespace

void moe_forward(const MoeWeights& w, const LayerShape& ls, StepContext& ctx, const float* x, float* y) {
  const ModelShape& s = *ctx.shape;
  const Numerics& num = s.numerics;
  Workspace& ws = *ctx.ws;
  const int64_t N = ctx.n_rows(), d = s.dim, E = s.experts, K = s.topk, I = s.inter;

  // ---- routing ----
  float* scores = ws.f(kWsGate, N * E);
  w.gate.forward(x, N, d, scores, E, ctx.pool);
  int32_t* chosen = ws.i(kWsiRoute, N * K);
  float* route = ws.f(kWsRouteW, N * K);
  // V4's variant: no gate temperature, the chosen scores always renormalised (no epsilon).
  const layers::RouterSpec spec{1.0, true, 0.0, s.route_scale};
  ctx.pool->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    std::vector<float> biased(E);
    for (int64_t row = b; row < e; ++row) {
      float* sc = scores + row * E;
      layers::router_scores(sc, E, spec);
      int32_t* ch = chosen + row * K;
      if (ls.hash) {
        const int32_t* t = w.tid2eid.data() + static_cast<int64_t>(ctx.rows[row].token) * K;
        std::copy(t, t + K, ch);
      } else {
        layers::select_experts(sc, w.bias.data(), E, K, layers::SelectOrder::kByIndex, biased.data(), ch);
      }
      layers::route_weights(sc, ch, K, spec, route + row * K);
    }
  });

  // ---- the experts' products and the combine (model/layers/experts.h) ----
  layers::ExpertStage stage{d, I, s.shared_inter, K, s.swiglu_limit, num.act_block, {}};
  if (num.reference()) {
    stage.rounding.bf16 = [&num](float* v, int64_t n) { num.bf16(v, n); };
    stage.rounding.act_quant = [&num](float* v, int64_t n) { num.act_quant(v, n); };
  }
  std::vector<layers::ExpertProducts> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) experts[e] = products(w.experts[e]);
  layers::experts_forward(stage, experts, products(w.shared), x, N, chosen, route, y, ws.experts(), ctx.pool);
}

}  // namespace dsinfer::model::deepseek_v4
