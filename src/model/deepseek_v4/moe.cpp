#include "model/deepseek_v4/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/swiglu.h"
#include "model/layers/router.h"
#include "model/layers/select.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

// One routed expert's int8 product (--numerics fast) on already quantized rows.
struct Int8Call {
  const kernels::Fp4Int8Linear* linear = nullptr;
  const int8_t* q = nullptr;
  int64_t ldq = 0;
  const float* xs = nullptr;
  int64_t lds = 0;
  int64_t M = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// The experts spread over the threads, each product on one thread (its result does not depend on it).
void run_int8(const std::vector<Int8Call>& calls, int64_t block, core::ThreadPool* pool) {
  pool->run(static_cast<int64_t>(calls.size()), [&](int64_t t, int) {
    const Int8Call& c = calls[t];
    c.linear->forward_quantized(c.q, c.ldq, c.xs, c.lds, c.M, block, c.y, c.ldy, nullptr);
  });
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
  // ---- gather each expert's rows (pairs are grouped by expert) ----
  const int64_t P = N * K, Is = s.shared_inter;
  const float* x_in = x;
  if (num.reference()) {
    float* xq = ws.f(kWsQuant, N * d);
    std::copy(x, x + N * d, xq);
    num.act_quant(xq, N * d);
    x_in = xq;
  }
  float* xg = ws.f(kWsExpertIn, P * d);
  float* pair_weight = ws.f(kWsShared, P);  // route weight per grouped pair
  ctx.pool->parallel_for(P, 16, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int32_t pair = pairs[j];
      std::copy(x_in + (pair / K) * d, x_in + (pair / K + 1) * d, xg + j * d);
    }
  });
  for (int64_t j = 0; j < P; ++j) pair_weight[j] = route[pairs[j]];

  // ---- --numerics fast: the routed rows quantized to int8 once for all their experts ----
  const bool fast = num.fast();
  const int64_t act_block = num.act_block;
  const int64_t bd = kernels::int8_block_count(d, act_block), bi = kernels::int8_block_count(I, act_block);
  // Kept across calls (no allocation per token); the lambdas below use the pointers, since a
  // thread_local named inside them would be the executing thread's own.
  thread_local std::vector<int8_t> q_in_buf, q_h_buf;
  thread_local std::vector<float> s_in_buf, s_h_buf;
  int8_t *q_in = nullptr, *q_h = nullptr;
  float *s_in = nullptr, *s_h = nullptr;
  if (fast) {
    q_in_buf.resize(P * d);
    s_in_buf.resize(P * bd);
    q_h_buf.resize(P * I);
    s_h_buf.resize(P * bi);
    q_in = q_in_buf.data();
    s_in = s_in_buf.data();
    q_h = q_h_buf.data();
    s_h = s_h_buf.data();
    ctx.pool->parallel_for(P, 16, [&](int64_t b, int64_t e) {
      kernels::quantize_int8_blocks(xg + b * d, e - b, d, d, act_block, q_in + b * d, d, s_in + b * bd, bd);
    });
  }
  std::vector<Int8Call> int8_calls;

  // ---- w1 / w3 of every active expert and of the shared expert in one parallel region ----
  float* g = ws.f(kWsExpertG, (P + N) * std::max(I, Is));
  float* u = ws.f(kWsExpertU, (P + N) * std::max(I, Is));
  float* h = ws.f(kWsExpertH, (P + N) * std::max(I, Is));
  float* sg = g + P * I;  // shared expert rows after the routed ones
  float* su = u + P * I;
  float* sh = h + P * I;
  std::vector<kernels::LinearCall> calls;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    if (fast && w.experts[e].int8()) {
      const int8_t* q = q_in + start[e] * d;
      const float* xs = s_in + start[e] * bd;
      int8_calls.push_back({&w.experts[e].w1_int8, q, d, xs, bd, n, g + start[e] * I, I});
      int8_calls.push_back({&w.experts[e].w3_int8, q, d, xs, bd, n, u + start[e] * I, I});
      continue;
    }
    calls.push_back({&w.experts[e].w1, xg + start[e] * d, n, d, g + start[e] * I, I});
    calls.push_back({&w.experts[e].w3, xg + start[e] * d, n, d, u + start[e] * I, I});
  }
  calls.push_back({&w.shared.w1, x_in, N, d, sg, Is});
  calls.push_back({&w.shared.w3, x_in, N, d, su, Is});
  run_int8(int8_calls, act_block, ctx.pool);
  kernels::linear_forward_many(calls, ctx.pool);

  // ---- clamped SwiGLU, route weight applied before the down projection ----
  ctx.pool->parallel_for(P + N, 8, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const bool shared = j >= P;
      const int64_t width = shared ? Is : I;
      float* gj = shared ? sg + (j - P) * Is : g + j * I;
      float* uj = shared ? su + (j - P) * Is : u + j * I;
      float* hj = shared ? sh + (j - P) * Is : h + j * I;
      num.bf16(gj, width);
      num.bf16(uj, width);
      kernels::swiglu(gj, uj, width, s.swiglu_limit, shared ? 1.0f : pair_weight[j], hj);
      num.bf16(hj, width);
      num.act_quant(hj, width);
      if (fast && !shared) {
        kernels::quantize_int8_blocks(hj, 1, I, I, act_block, q_h + j * I, I, s_h + j * bi, bi);
      }
    }
  });

  // ---- w2 of every active expert and of the shared expert ----
  float* og = ws.f(kWsExpertOut, (P + N) * d);
  float* so = og + P * d;
  calls.clear();
  int8_calls.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    if (fast && w.experts[e].int8()) {
      int8_calls.push_back(
          {&w.experts[e].w2_int8, q_h + start[e] * I, I, s_h + start[e] * bi, bi, n, og + start[e] * d, d});
      continue;
    }
    calls.push_back({&w.experts[e].w2, h + start[e] * I, n, I, og + start[e] * d, d});
  }
  calls.push_back({&w.shared.w2, sh, N, Is, so, d});
  run_int8(int8_calls, act_block, ctx.pool);
  kernels::linear_forward_many(calls, ctx.pool);

  // ---- per row: routed outputs in ascending expert id (ties by slot), then the shared expert ----
  int32_t* grouped_of = ws.i(kWsiSlotOf, P);  // pair → its position in the grouped order
  for (int64_t j = 0; j < P; ++j) grouped_of[pairs[j]] = static_cast<int32_t>(j);
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    int32_t order[64];
    for (int64_t row = b; row < e; ++row) {
      std::iota(order, order + K, 0);
      const int32_t* ch = chosen + row * K;
      std::sort(order, order + K, [&](int32_t p, int32_t q) { return ch[p] < ch[q] || (ch[p] == ch[q] && p < q); });
      float* yr = y + row * d;
      std::fill(yr, yr + d, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        float* src = og + static_cast<int64_t>(grouped_of[row * K + order[k]]) * d;
        num.bf16(src, d);
        for (int64_t c = 0; c < d; ++c) yr[c] += src[c];
      }
      float* sr = so + row * d;
      num.bf16(sr, d);
      for (int64_t c = 0; c < d; ++c) yr[c] += sr[c];
      num.bf16(yr, d);
    }
  });
}

}  // namespace dsinfer::model::deepseek_v4
