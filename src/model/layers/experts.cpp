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

// The int8 products and the exact ones (the shared expert's, at least) of one phase in one parallel
// region: the int8 products first, each on one thread (its result does not depend on it), then the
// exact products' tasks. One join per phase instead of two, and the exact products fill the tail of
// the int8 ones.
void run_phase(const std::vector<Int8Call>& int8, std::span<const kernels::LinearCall> exact, int64_t block,
               core::ThreadPool* pool) {
  kernels::linear_forward_many(exact, pool, static_cast<int64_t>(int8.size()), [&int8, block](int64_t t) {
    const Int8Call& c = int8[t];
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
    std::vector<int32_t> fill(start, start + E);
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
  run_phase(int8_calls, calls, block, pool);

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
  run_phase(int8_calls, calls, block, pool);

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
