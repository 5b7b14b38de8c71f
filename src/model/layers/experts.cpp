#include "model/layers/experts.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/swiglu.h"

namespace dsinfer::model::layers {
namespace {

// One routed expert's int8 product on already quantized rows.
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
  if (calls.empty()) return;
  pool->run(static_cast<int64_t>(calls.size()), [&](int64_t t, int) {
    const Int8Call& c = calls[t];
    c.linear->forward_quantized(c.q, c.ldq, c.xs, c.lds, c.M, block, c.y, c.ldy, nullptr);
  });
}

template <typename T>
T* sized(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

void round_with(const std::function<void(float*, int64_t)>& f, float* x, int64_t n) {
  if (f) f(x, n);
}

// The grouped rows of experts_forward, gathered (and quantized where int8) for the pieced path.
struct PiecedInputs {
  const float* xg;
  const float* pair_weight;
  const int8_t* q_in;
  const float* s_in;
  int64_t bd, bi;  // scales per row of q_in and of q_h
  const int32_t* start;
  const int32_t* pairs;
};

// The decode path of experts_forward (see its comment): no roundings, at most kExpertPieceMaxRows rows.
void pieced_forward(const ExpertStage& st, std::span<const ExpertProducts> experts, const ExpertProducts& shared,
                    const float* x, int64_t N, const PiecedInputs& in, float* y, ExpertScratch& sc,
                    core::ThreadPool* pool) {
  const int64_t d = st.dim, I = st.inter, Is = st.shared_inter, K = st.topk, P = N * K;
  const int64_t E = static_cast<int64_t>(experts.size());
  const int64_t block = st.act_block;
  const int32_t* start = in.start;
  // A piece starts at a multiple of 16 rows (panels; the widest SIMD vector of floats) and of the
  // activation block, so the SwiGLU and the quantization of h see the elements a whole row would.
  const int64_t align = block > 0 ? std::lcm<int64_t>(16, block) : 16;
  const int64_t want = st.piece_rows > 0 ? st.piece_rows : 128;
  const int64_t up_rows = (want + align - 1) / align * align;
  // The down pieces split the output columns: enough of them to keep every thread busy to the end.
  const int64_t threads = pool->size();
  const int64_t down_rows = std::clamp<int64_t>((d / (4 * threads)) / 16 * 16, 16, std::max<int64_t>(up_rows, 16));

  float* g = sized(sc.g, (P + N) * std::max(I, Is));
  float* u = sized(sc.u, (P + N) * std::max(I, Is));
  float* h = sized(sc.h, (P + N) * std::max(I, Is));
  float* sg = g + P * I;  // shared expert rows after the routed ones
  float* su = u + P * I;
  float* sh = h + P * I;
  int8_t* q_h = in.q_in != nullptr ? sized(sc.q_h, P * I) : nullptr;
  float* s_h = in.q_in != nullptr ? sized(sc.s_h, P * in.bi) : nullptr;

  // ---- w1 / w3 pieces with their SwiGLU; the shared expert's first (the largest pieces) ----
  std::vector<ExpertPiece>& pieces = sc.pieces;
  pieces.clear();
  for (int64_t r = 0; r < Is; r += up_rows)
    pieces.push_back({static_cast<int32_t>(E), static_cast<int32_t>(r), static_cast<int32_t>(std::min(Is, r + up_rows))});
  for (int64_t e = 0; e < E; ++e) {
    if (start[e + 1] == start[e]) continue;
    for (int64_t r = 0; r < I; r += up_rows)
      pieces.push_back({static_cast<int32_t>(e), static_cast<int32_t>(r), static_cast<int32_t>(std::min(I, r + up_rows))});
  }
  pool->run(static_cast<int64_t>(pieces.size()), [&](int64_t t, int) {
    const ExpertPiece pc = pieces[t];
    const int64_t r0 = pc.begin, r1 = pc.end;
    if (pc.expert == E) {
      shared.w1->forward_rows(x, N, d, sg, Is, r0, r1);
      shared.w3->forward_rows(x, N, d, su, Is, r0, r1);
      for (int64_t row = 0; row < N; ++row) {
        const int64_t at = row * Is + r0;
        kernels::swiglu(sg + at, su + at, r1 - r0, st.swiglu_limit, 1.0f, sh + at);
      }
      return;
    }
    const ExpertProducts& w = experts[pc.expert];
    const int64_t s0 = start[pc.expert], n = start[pc.expert + 1] - s0;
    if (w.int8()) {
      const int8_t* q = in.q_in + s0 * d;
      const float* xs = in.s_in + s0 * in.bd;
      w.w1_int8->forward_quantized_rows(q, d, xs, in.bd, n, block, g + s0 * I, I, r0, r1);
      w.w3_int8->forward_quantized_rows(q, d, xs, in.bd, n, block, u + s0 * I, I, r0, r1);
    } else {
      w.w1->forward_rows(in.xg + s0 * d, n, d, g + s0 * I, I, r0, r1);
      w.w3->forward_rows(in.xg + s0 * d, n, d, u + s0 * I, I, r0, r1);
    }
    for (int64_t j = s0; j < s0 + n; ++j) {
      const int64_t at = j * I + r0;
      kernels::swiglu(g + at, u + at, r1 - r0, st.swiglu_limit, in.pair_weight[j], h + at);
      if (w.int8()) {
        kernels::quantize_int8_blocks(h + at, 1, I, r1 - r0, block, q_h + at, I, s_h + j * in.bi + r0 / block, in.bi);
      }
    }
  });

  // ---- pieces of the output columns: every w2 on them, then the sum in the fixed order ----
  float* og = sized(sc.out, (P + N) * d);
  float* so = og + P * d;
  pieces.clear();
  for (int64_t c = 0; c < d; c += down_rows)
    pieces.push_back({0, static_cast<int32_t>(c), static_cast<int32_t>(std::min(d, c + down_rows))});
  pool->run(static_cast<int64_t>(pieces.size()), [&](int64_t t, int) {
    const int64_t c0 = pieces[t].begin, c1 = pieces[t].end;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t s0 = start[e], n = start[e + 1] - s0;
      if (n == 0) continue;
      const ExpertProducts& w = experts[e];
      if (w.int8()) {
        w.w2_int8->forward_quantized_rows(q_h + s0 * I, I, s_h + s0 * in.bi, in.bi, n, block, og + s0 * d, d, c0, c1);
      } else {
        w.w2->forward_rows(h + s0 * I, n, I, og + s0 * d, d, c0, c1);
      }
    }
    shared.w2->forward_rows(sh, N, Is, so, d, c0, c1);
    // Grouped order is ascending expert id, equal ids in slot order: each row's routed order.
    for (int64_t row = 0; row < N; ++row) std::fill(y + row * d + c0, y + row * d + c1, 0.0f);
    for (int64_t j = 0; j < P; ++j) {
      float* yr = y + (in.pairs[j] / K) * d;
      const float* src = og + j * d;
      for (int64_t c = c0; c < c1; ++c) yr[c] += src[c];
    }
    for (int64_t row = 0; row < N; ++row) {
      float* yr = y + row * d;
      const float* sr = so + row * d;
      for (int64_t c = c0; c < c1; ++c) yr[c] += sr[c];
    }
  });
}

}  // namespace

void experts_forward(const ExpertStage& st, std::span<const ExpertProducts> experts, const ExpertProducts& shared,
                     const float* x, int64_t N, const int32_t* chosen, const float* route, float* y,
                     ExpertScratch& sc, core::ThreadPool* pool) {
  const int64_t d = st.dim, I = st.inter, Is = st.shared_inter, K = st.topk;
  const int64_t E = static_cast<int64_t>(experts.size());
  if (N == 0) return;
  DSINFER_CHECK(pool != nullptr && shared.w1 != nullptr && K > 0 && K <= 64, "experts_forward: bad arguments");
  const ExpertRounding& rnd = st.rounding;

  // ---- group (row, slot) pairs by expert; each pair's output lands in its own slot row ----
  int32_t* start = sized(sc.start, E + 1);
  int32_t* pairs = sized(sc.pairs, N * K);
  std::fill(start, start + E + 1, 0);
  for (int64_t i = 0; i < N * K; ++i) {
    DSINFER_CHECK(chosen[i] >= 0 && chosen[i] < E, "experts_forward: expert ", chosen[i], " of ", E);
    ++start[chosen[i] + 1];
  }
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  {
    int32_t* fill = sized(sc.grouped_of, std::max<int64_t>(E, N * K));  // free until the combine
    std::copy(start, start + E, fill);
    for (int64_t i = 0; i < N * K; ++i) pairs[fill[chosen[i]]++] = static_cast<int32_t>(i);
  }
  // ---- gather each expert's rows (pairs are grouped by expert) ----
  const int64_t P = N * K;
  const float* x_in = x;
  if (rnd.act_quant) {
    float* xq = sized(sc.xq, N * d);
    std::copy(x, x + N * d, xq);
    rnd.act_quant(xq, N * d);
    x_in = xq;
  }
  const float* x_shared = rnd.act_quant_shared ? x_in : x;
  float* xg = sized(sc.xg, P * d);
  float* pair_weight = sized(sc.pair_weight, P);  // route weight per grouped pair
  pool->parallel_for(P, 16, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const int32_t pair = pairs[j];
      std::copy(x_in + (pair / K) * d, x_in + (pair / K + 1) * d, xg + j * d);
    }
  });
  for (int64_t j = 0; j < P; ++j) pair_weight[j] = route[pairs[j]];

  // ---- int8 products: the routed rows quantized once for all their experts ----
  bool any_int8 = false;
  for (int64_t e = 0; e < E && !any_int8; ++e) any_int8 = experts[e].int8() && start[e + 1] > start[e];
  const int64_t block = st.act_block;
  DSINFER_CHECK(!any_int8 || block > 0, "experts_forward: int8 products without an activation block");
  const int64_t bd = any_int8 ? kernels::int8_block_count(d, block) : 0;
  const int64_t bi = any_int8 ? kernels::int8_block_count(I, block) : 0;
  int8_t *q_in = nullptr, *q_h = nullptr;
  float *s_in = nullptr, *s_h = nullptr;
  if (any_int8) {
    q_in = sized(sc.q_in, P * d);
    s_in = sized(sc.s_in, P * bd);
    q_h = sized(sc.q_h, P * I);
    s_h = sized(sc.s_h, P * bi);
    pool->parallel_for(P, 16, [&](int64_t b, int64_t e) {
      kernels::quantize_int8_blocks(xg + b * d, e - b, d, d, block, q_in + b * d, d, s_in + b * bd, bd);
    });
  }
  if (N <= kExpertPieceMaxRows && !rnd.bf16 && !rnd.act_quant) {
    const PiecedInputs in{xg, pair_weight, q_in, s_in, bd, bi, start, pairs};
    pieced_forward(st, experts, shared, x, N, in, y, sc, pool);
    return;
  }
  std::vector<Int8Call> int8_calls;
  // The pair rows whose hidden activations the int8 w2 takes (the others take h as fp32).
  auto int8_pair = [&](int64_t j) {
    if (!any_int8) return false;
    const int64_t e = chosen[pairs[j]];
    return experts[e].int8();
  };

  // ---- w1 / w3 of every active expert and of the shared expert in one parallel region ----
  const int64_t width = std::max(I, Is);
  float* g = sized(sc.g, (P + N) * width);
  float* u = sized(sc.u, (P + N) * width);
  float* h = sized(sc.h, (P + N) * width);
  float* sg = g + P * I;  // shared expert rows after the routed ones
  float* su = u + P * I;
  float* sh = h + P * I;
  std::vector<kernels::LinearCall> calls;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    const ExpertProducts& w = experts[e];
    if (w.int8()) {
      const int8_t* q = q_in + start[e] * d;
      const float* xs = s_in + start[e] * bd;
      int8_calls.push_back({w.w1_int8, q, d, xs, bd, n, g + start[e] * I, I});
      int8_calls.push_back({w.w3_int8, q, d, xs, bd, n, u + start[e] * I, I});
      continue;
    }
    calls.push_back({w.w1, xg + start[e] * d, n, d, g + start[e] * I, I});
    calls.push_back({w.w3, xg + start[e] * d, n, d, u + start[e] * I, I});
  }
  calls.push_back({shared.w1, x_shared, N, d, sg, Is});
  calls.push_back({shared.w3, x_shared, N, d, su, Is});
  run_int8(int8_calls, block, pool);
  kernels::linear_forward_many(calls, pool);

  // ---- clamped SwiGLU, route weight applied before the down projection ----
  pool->parallel_for(P + N, 8, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      const bool is_shared = j >= P;
      const int64_t n = is_shared ? Is : I;
      float* gj = is_shared ? sg + (j - P) * Is : g + j * I;
      float* uj = is_shared ? su + (j - P) * Is : u + j * I;
      float* hj = is_shared ? sh + (j - P) * Is : h + j * I;
      round_with(rnd.bf16, gj, n);
      round_with(rnd.bf16, uj, n);
      kernels::swiglu(gj, uj, n, st.swiglu_limit, is_shared ? 1.0f : pair_weight[j], hj);
      round_with(rnd.bf16, hj, n);
      if (!is_shared || rnd.act_quant_shared) round_with(rnd.act_quant, hj, n);
      if (!is_shared && int8_pair(j)) {
        kernels::quantize_int8_blocks(hj, 1, I, I, block, q_h + j * I, I, s_h + j * bi, bi);
      }
    }
  });

  // ---- w2 of every active expert and of the shared expert ----
  float* og = sized(sc.out, (P + N) * d);
  float* so = og + P * d;
  calls.clear();
  int8_calls.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    const ExpertProducts& w = experts[e];
    if (w.int8()) {
      int8_calls.push_back({w.w2_int8, q_h + start[e] * I, I, s_h + start[e] * bi, bi, n, og + start[e] * d, d});
      continue;
    }
    calls.push_back({w.w2, h + start[e] * I, n, I, og + start[e] * d, d});
  }
  calls.push_back({shared.w2, sh, N, Is, so, d});
  run_int8(int8_calls, block, pool);
  kernels::linear_forward_many(calls, pool);

  // ---- per row: routed outputs in ascending expert id (ties by slot), then the shared expert ----
  int32_t* grouped_of = sized(sc.grouped_of, P);  // pair → its position in the grouped order
  for (int64_t j = 0; j < P; ++j) grouped_of[pairs[j]] = static_cast<int32_t>(j);
  pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    int32_t order[64];
    for (int64_t row = b; row < e; ++row) {
      std::iota(order, order + K, 0);
      const int32_t* ch = chosen + row * K;
      std::sort(order, order + K, [&](int32_t p, int32_t q) { return ch[p] < ch[q] || (ch[p] == ch[q] && p < q); });
      float* yr = y + row * d;
      std::fill(yr, yr + d, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        float* src = og + static_cast<int64_t>(grouped_of[row * K + order[k]]) * d;
        round_with(rnd.bf16, src, d);
        for (int64_t c = 0; c < d; ++c) yr[c] += src[c];
      }
      float* sr = so + row * d;
      round_with(rnd.bf16, sr, d);
      for (int64_t c = 0; c < d; ++c) yr[c] += sr[c];
      round_with(rnd.bf16, yr, d);
    }
  });
}

}  // namespace dsinfer::model::layers
