#include "model/deepseek_v4/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/topk.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

// One expert applied to `n` gathered rows: h = SwiGLU(w1·x, w3·x) · route weight, out = w2 · h.
void run_expert(const ExpertWeights& e, const Numerics& num, int64_t d, int64_t inter, float limit, const float* x,
                int64_t n, const float* route, float* g, float* u, float* h, float* out, core::ThreadPool* pool) {
  e.w1.forward(x, n, d, g, inter, pool);
  e.w3.forward(x, n, d, u, inter, pool);
  num.bf16(g, n * inter);
  num.bf16(u, n * inter);
  for (int64_t r = 0; r < n; ++r) {
    kernels::swiglu(g + r * inter, u + r * inter, inter, limit, route ? route[r] : 1.0f, h + r * inter);
  }
  num.bf16(h, n * inter);
  num.act_quant(h, n * inter);
  e.w2.forward(h, n, inter, out, d, pool);
  num.bf16(out, n * d);
}

}  // namespace

float sqrt_softplus(float x) { return std::sqrt(std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x)))); }

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
  ctx.pool->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    std::vector<float> biased(E);
    std::vector<int32_t> scratch;
    for (int64_t row = b; row < e; ++row) {
      float* sc = scores + row * E;
      for (int64_t i = 0; i < E; ++i) sc[i] = sqrt_softplus(sc[i]);
      int32_t* ch = chosen + row * K;
      if (ls.hash) {
        const int32_t* t = w.tid2eid.data() + static_cast<int64_t>(ctx.rows[row].token) * K;
        std::copy(t, t + K, ch);
      } else {
        for (int64_t i = 0; i < E; ++i) biased[i] = sc[i] + w.bias[i];
        kernels::topk_indices(biased.data(), E, K, ch, scratch);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += sc[ch[k]];
      for (int64_t k = 0; k < K; ++k) route[row * K + k] = sc[ch[k]] / sum * s.route_scale;
    }
  });

  // ---- group (row, slot) pairs by expert; each pair's output lands in its own slot row ----
  int32_t* start = ws.i(kWsiExpertStart, E + 1);
  int32_t* pairs = ws.i(kWsiExpertRows, N * K);
  std::fill(start, start + E + 1, 0);
  for (int64_t i = 0; i < N * K; ++i) ++start[chosen[i] + 1];
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  {
    std::vector<int32_t> fill(start, start + E);
    for (int64_t i = 0; i < N * K; ++i) pairs[fill[chosen[i]]++] = static_cast<int32_t>(i);
  }
  std::vector<int32_t> active;
  for (int64_t e = 0; e < E; ++e)
    if (start[e + 1] > start[e]) active.push_back(static_cast<int32_t>(e));

  float* slot_out = ws.f(kWsExpertOut, N * K * d);
  const float* x_in = x;
  if (num.reference()) {
    float* xq = ws.f(kWsQuant, N * d);
    std::copy(x, x + N * d, xq);
    num.act_quant(xq, N * d);
    x_in = xq;
  }
  // Few rows per expert (decode): each product uses the whole pool. Many: experts run side by side.
  const bool per_expert_threads = active.size() >= 2 && N * K >= 4 * static_cast<int64_t>(active.size());
  auto expert_task = [&](int64_t ai, int thread, core::ThreadPool* inner) {
    const int32_t e = active[ai];
    const int64_t n = start[e + 1] - start[e];
    float* xin = ws.tf(thread, 0, n * d);
    float* rw = ws.tf(thread, 1, n);
    for (int64_t j = 0; j < n; ++j) {
      const int32_t pair = pairs[start[e] + j];
      std::copy(x_in + (pair / K) * d, x_in + (pair / K + 1) * d, xin + j * d);
      rw[j] = route[pair];
    }
    float* g = ws.tf(thread, 2, n * I);
    float* u = ws.tf(thread, 3, n * I);
    float* h = ws.tf(thread, 4, n * I);
    float* o = ws.tf(thread, 5, n * d);
    run_expert(w.experts[e], num, d, I, s.swiglu_limit, xin, n, rw, g, u, h, o, inner);
    for (int64_t j = 0; j < n; ++j) {
      const int32_t pair = pairs[start[e] + j];
      std::copy(o + j * d, o + (j + 1) * d, slot_out + static_cast<int64_t>(pair) * d);
    }
  };
  if (per_expert_threads) {
    ctx.pool->run(static_cast<int64_t>(active.size()), [&](int64_t ai, int thread) { expert_task(ai, thread, nullptr); });
  } else {
    for (int64_t ai = 0; ai < static_cast<int64_t>(active.size()); ++ai) expert_task(ai, 0, ctx.pool);
  }

  // ---- shared expert on all rows, then the sum in a fixed order per row ----
  const int64_t Is = s.shared_inter;
  float* sg = ws.f(kWsExpertG, N * Is);
  float* su = ws.f(kWsExpertU, N * Is);
  float* sh = ws.f(kWsExpertH, N * Is);
  float* so = ws.f(kWsShared, N * d);
  run_expert(w.shared, num, d, Is, s.swiglu_limit, x_in, N, nullptr, sg, su, sh, so, ctx.pool);
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    int32_t order[64];
    for (int64_t row = b; row < e; ++row) {
      // Routed outputs in ascending expert id (ties by slot), then the shared expert.
      std::iota(order, order + K, 0);
      const int32_t* ch = chosen + row * K;
      std::sort(order, order + K, [&](int32_t p, int32_t q) { return ch[p] < ch[q] || (ch[p] == ch[q] && p < q); });
      float* yr = y + row * d;
      std::fill(yr, yr + d, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float* src = slot_out + (row * K + order[k]) * d;
        for (int64_t c = 0; c < d; ++c) yr[c] += src[c];
      }
      const float* sr = so + row * d;
      for (int64_t c = 0; c < d; ++c) yr[c] += sr[c];
      num.bf16(yr, d);
    }
  });
}

}  // namespace dsinfer::model::deepseek_v4
