#include "model/deepseek_v4/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sink_attention.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/indexer.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

// Input of an FP8/FP4-weight product: itself, or (reference numerics) its FP8-QDQ'd copy.
const float* product_input(const Numerics& num, const float* x, int64_t n, Workspace& ws, int slot) {
  if (!num.reference()) return x;
  float* q = ws.f(slot, n);
  std::copy(x, x + n, q);
  num.act_quant(q, n);
  return q;
}

// Where every sequence's decoded KV rows (KvCodec::decode_packed) live for this layer's attention.
struct SeqPlan {
  int64_t win_lo = 0;       // first window position decoded
  int64_t win_rows = 0;
  int64_t comp_rows = 0;    // decoded compressed entries
  size_t win_offset = 0;    // byte offsets into the decoded window rows
  size_t comp_offset = 0;   // and into the decoded compressed entries (a buffer of their own)
  int32_t* slot_of = nullptr;    // CSA: entry index → decoded row, -1 if not selected by any row
};

struct DecodeJob {
  const uint8_t* src;
  uint8_t* dst;
};

// n bytes of a float workspace slot.
uint8_t* byte_buffer(Workspace& ws, int slot, size_t n) {
  return reinterpret_cast<uint8_t*>(ws.f(slot, std::max<size_t>((n + 3) / 4, 1)));
}

// The largest step that runs the attention core and wo_a in one region per group of heads.
constexpr int64_t kFusedGroupMaxRows = 16;

}  // namespace

void attention_forward(const AttentionWeights& w, const LayerShape& ls, StepContext& ctx, const float* a, float* out) {
  const ModelShape& s = *ctx.shape;
  const Numerics& num = s.numerics;
  Workspace& ws = *ctx.ws;
  const int64_t N = ctx.n_rows(), d = s.dim, H = s.heads, hd = s.head_dim, rd = s.rope_dim, W = s.window;
  const int64_t pairs = rd / 2;
  ctx.clock.enter(Stage::kAttnProducts);

  // ---- every product of the attention input in one parallel region ----
  // FP8/FP4-weight products take the (reference numerics: FP8-quantised) input; the BF16 ones
  // (compressor wkv/wgate, fp32 or fast bf16 dot, and indexer weights_proj) take it as it is.
  const float* a_in = product_input(num, a, N * d, ws, kWsQuant);
  float* qr = ws.f(kWsQr, N * s.q_lora);
  float* kv = ws.f(kWsKv, N * hd);
  std::vector<kernels::LinearCall> calls;
  calls.push_back({&w.wq_a, a_in, N, d, qr, s.q_lora});
  calls.push_back({&w.wkv, a_in, N, d, kv, hd});
  float *u = nullptr, *sc = nullptr;
  IndexerInputs ix;
  if (ls.compressed()) {
    const int64_t cw = w.compressor->wkv.rows();
    u = ws.f(kWsU, N * cw);
    sc = ws.f(kWsS, N * cw);
    calls.push_back({&w.compressor->wkv, a, N, d, u, cw});
    calls.push_back({&w.compressor->wgate, a, N, d, sc, cw});
  }
  if (ls.csa()) {
    const IndexerWeights& iw = *w.indexer;
    const int64_t icw = iw.compressor.wkv.rows();
    float* iu = ws.f(kWsIdxU, N * icw);
    float* is = ws.f(kWsIdxS, N * icw);
    ix.u = iu;
    ix.sc = is;
    ix.wts = ws.f(kWsIdxW, N * s.index_heads);
    ix.qi = ws.f(kWsIdxQ, N * s.index_heads * s.index_dim);
    calls.push_back({&iw.compressor.wkv, a, N, d, iu, icw});
    calls.push_back({&iw.compressor.wgate, a, N, d, is, icw});
    calls.push_back({&iw.weights_proj, a, N, d, ix.wts, s.index_heads});
  }
  kernels::linear_forward_many(calls, ctx.pool);

  ctx.pool->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      float* x = qr + row * s.q_lora;
      num.bf16(x, s.q_lora);
      kernels::rmsnorm(x, w.q_norm.data(), s.q_lora, s.eps, x);
      num.bf16(x, s.q_lora);
      float* k = kv + row * hd;
      num.bf16(k, hd);
      kernels::rmsnorm(k, w.kv_norm.data(), hd, s.eps, k);
      num.bf16(k, hd);
      kernels::rope_rotate(k + hd - rd, ctx.cos(ls.rope, row), ctx.sin(ls.rope, row), pairs, false);
      num.bf16(k, hd);
      // Encoding applies the model's FP8 QDQ to the nope dims; k then holds exactly the stored value.
      const RowInfo& ri = ctx.rows[row];
      s.kv.encode(k, ctx.layer_state(ri.seq, ls).window.row(ri.pos));
    }
  });
  // ---- the window KV rows each sequence attends, decoded (this step's rows are stored above) ----
  const int64_t row_bytes = s.kv.packed_bytes();
  std::vector<SeqPlan> plans(ctx.seqs.size());
  std::vector<DecodeJob> jobs;
  size_t total = 0;
  for (size_t i = 0; i < ctx.seqs.size(); ++i) {
    const SeqSlice& sq = ctx.seqs[i];
    SeqPlan& pl = plans[i];
    pl.win_lo = std::max<int64_t>({sq.window_floor, sq.start - W + 1, 0});
    pl.win_rows = sq.start + sq.n - pl.win_lo;
    pl.win_offset = total;
    total += static_cast<size_t>(pl.win_rows * row_bytes);
  }
  uint8_t* decoded = byte_buffer(ws, kWsKvDecoded, total);
  for (size_t i = 0; i < ctx.seqs.size(); ++i) {
    const SeqPlan& pl = plans[i];
    const LayerState& st = ctx.layer_state(static_cast<int32_t>(i), ls);
    for (int64_t p = pl.win_lo; p < pl.win_lo + pl.win_rows; ++p)
      jobs.push_back({st.window.row(p), decoded + pl.win_offset + (p - pl.win_lo) * row_bytes});
  }
  // Two rows ahead, the source bytes are requested and the destination lines claimed: without it the
  // decode stalled on its stores (the buffer's lines are far out of L2 by then: 75 % of the decode's
  // samples sat on its store in a 16-row step).
  auto decode_jobs = [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      if (j + 2 < e) {
        for (int64_t off = 0; off < s.kv.bytes(); off += 64) __builtin_prefetch(jobs[j + 2].src + off, 0, 3);
        for (int64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(jobs[j + 2].dst + off, 1, 3);
      }
      s.kv.decode_packed(jobs[j].src, jobs[j].dst);
    }
  };
  // Pieces of at least 16 rows, at most 4 per thread (as parallel_for would split them).
  const int64_t n_jobs = static_cast<int64_t>(jobs.size());
  const int64_t pieces = std::min<int64_t>((n_jobs + 15) / 16, 4 * static_cast<int64_t>(ctx.pool->size()));
  const int64_t piece = pieces > 0 ? (n_jobs + pieces - 1) / pieces : 0;

  // ---- the products of the query latent (attention and indexer queries), with the window decode ----
  // The window rows do not depend on these products: their decode joins the region (no region of its
  // own; it fills the products' tail). It is counted under the attention products.
  float* q = ws.f(kWsQ, N * H * hd);
  const float* qr_in = product_input(num, qr, N * s.q_lora, ws, kWsQuant2);
  calls.clear();
  calls.push_back({&w.wq_b, qr_in, N, s.q_lora, q, H * hd});
  if (ls.csa()) calls.push_back({&w.indexer->wq_b, qr_in, N, s.q_lora, ix.qi, s.index_heads * s.index_dim});
  kernels::linear_forward_many(calls, ctx.pool, piece > 0 ? (n_jobs + piece - 1) / piece : 0,
                               [&](int64_t t) { decode_jobs(t * piece, std::min(n_jobs, (t + 1) * piece)); });
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      float* x = q + row * H * hd;
      num.bf16(x, H * hd);
      for (int64_t h = 0; h < H; ++h) {
        float* qh = x + h * hd;
        kernels::rmsnorm(qh, nullptr, hd, s.eps, qh);
        num.bf16(qh, hd);
        kernels::rope_rotate(qh + hd - rd, ctx.cos(ls.rope, row), ctx.sin(ls.rope, row), pairs, false);
      }
      num.bf16(x, H * hd);
    }
  });

  // ---- compressed entries (written before attention: visible to the token completing them) ----
  int32_t* sel = nullptr;
  int32_t* sel_count = nullptr;
  ctx.clock.enter(Stage::kCompressor);
  if (ls.compressed()) {
    compressor_forward(*w.compressor, ls, false, ctx, u, sc);
    if (ls.csa()) {
      sel = ws.i(kWsiSel, N * s.index_topk);
      sel_count = ws.i(kWsiSelCount, N);
      indexer_forward(*w.indexer, ls, ctx, ix, sel, sel_count);
    }
  }

  // ---- decode the compressed entries each sequence attends ----
  ctx.clock.enter(Stage::kAttnCore);
  uint8_t* decoded_comp = nullptr;
  if (ls.compressed()) {
    jobs.clear();
    total = 0;
    int32_t* slot_maps = nullptr;
    if (ls.csa()) {
      int64_t maps = 0;
      for (const SeqSlice& sq : ctx.seqs) maps += (sq.start + sq.n) / ls.ratio;
      slot_maps = ws.i(kWsiSlotOf, std::max<int64_t>(maps, 1));
    }
    int64_t map_offset = 0;
    for (size_t i = 0; i < ctx.seqs.size(); ++i) {
      const SeqSlice& sq = ctx.seqs[i];
      SeqPlan& pl = plans[i];
      const int64_t visible = (sq.start + sq.n) / ls.ratio;  // entries visible to the last row
      pl.comp_rows = 0;
      pl.comp_offset = total;
      if (ls.csa()) {
        pl.slot_of = slot_maps + map_offset;
        map_offset += visible;
        std::fill(pl.slot_of, pl.slot_of + visible, -1);
        for (int64_t k = 0; k < sq.n; ++k) {
          const int64_t row = sq.first_row + k;
          for (int32_t j = 0; j < sel_count[row]; ++j) {
            const int32_t g = sel[row * s.index_topk + j];
            if (pl.slot_of[g] < 0) pl.slot_of[g] = static_cast<int32_t>(pl.comp_rows++);
          }
        }
      } else {
        pl.comp_rows = visible;
      }
      total += static_cast<size_t>(pl.comp_rows * row_bytes);
    }
    decoded_comp = byte_buffer(ws, kWsKvDecodedComp, total);
    for (size_t i = 0; i < ctx.seqs.size(); ++i) {
      const SeqSlice& sq = ctx.seqs[i];
      const SeqPlan& pl = plans[i];
      if (ls.csa()) {
        const int64_t visible = (sq.start + sq.n) / ls.ratio;
        for (int64_t g = 0; g < visible; ++g)
          if (pl.slot_of[g] >= 0)
            jobs.push_back({sq.state->entry_kv(ls.part, g), decoded_comp + pl.comp_offset + pl.slot_of[g] * row_bytes});
      } else {
        for (int64_t g = 0; g < pl.comp_rows; ++g)
          jobs.push_back({sq.state->entry_kv(ls.part, g), decoded_comp + pl.comp_offset + g * row_bytes});
      }
    }
    ctx.pool->parallel_for(static_cast<int64_t>(jobs.size()), 16, decode_jobs);
  }

  // ---- sink-softmax core: tasks = (row, block of heads) ----
  float* o = ws.f(kWsO, N * H * hd);
  const int threads = ctx.pool->size();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  auto attend = [&](int64_t row, int64_t h0, int64_t h1, int thread) {
    const RowInfo& ri = ctx.rows[row];
    const SeqPlan& pl = plans[ri.seq];
    const SeqSlice& sq = ctx.seqs[ri.seq];
    auto& rows = ws.tbytes(thread);
    rows.clear();
    // Canonical order: window keys by position, then compressed entries by index.
    const int64_t lo = std::max<int64_t>({sq.window_floor, ri.pos - W + 1, 0});
    for (int64_t p = lo; p <= ri.pos; ++p) rows.push_back(decoded + pl.win_offset + (p - pl.win_lo) * row_bytes);
    if (ls.csa()) {
      for (int32_t j = 0; j < sel_count[row]; ++j)
        rows.push_back(decoded_comp + pl.comp_offset + pl.slot_of[sel[row * s.index_topk + j]] * row_bytes);
    } else if (ls.compressed()) {
      const int64_t visible = (ri.pos + 1) / ls.ratio;
      for (int64_t g = 0; g < visible; ++g) rows.push_back(decoded_comp + pl.comp_offset + g * row_bytes);
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    kernels::SinkAttention at;
    at.q = q + (row * H + h0) * hd;
    at.heads = h1 - h0;
    at.dim = hd;
    at.packed = rows.data();
    at.packed_bf16 = s.kv.packed_bf16_dims();
    at.n = n;
    at.sink = w.sink.data() + h0;
    at.scale = scale;
    at.bf16_probs = num.reference();
    at.bf16_logits = s.bf16_logits;
    at.out = o + (row * H + h0) * hd;
    at.scratch = ws.tf(thread, 0, kernels::sink_attention_scratch(at));
    kernels::sink_attention(at);
    for (int64_t h = h0; h < h1; ++h) {
      float* oh = o + (row * H + h) * hd;
      num.bf16(oh, hd);
      kernels::rope_rotate(oh + hd - rd, ctx.cos(ls.rope, row), ctx.sin(ls.rope, row), pairs, true);
      num.bf16(oh, hd);
    }
  };

  // ---- grouped low-rank output: r_g = wo_a[g] · o_g, out = wo_b · r ----
  const int64_t G = s.groups, ig = H * hd / G, orank = s.o_lora;
  float* rr = ws.f(kWsR, N * G * orank);
  if (N <= kFusedGroupMaxRows && H % G == 0 && G % threads == 0) {
    // Decode: a task per group attends its heads, then runs that group's wo_a, in one region: no join
    // between the core and wo_a, and one thread's compute overlaps the other's weight stream (equal
    // tasks, as many per thread). Each row and head is the same computation as below, bitwise (the
    // chunk-invariance tests compare this path, TINY's 2 groups on 2 threads, with one pass).
    ctx.pool->run(G, [&](int64_t g, int thread) {
      const int64_t hg = H / G;
      for (int64_t row = 0; row < N; ++row) attend(row, g * hg, (g + 1) * hg, thread);
      w.wo_a.forward_rows(o + g * ig, N, H * hd, rr, G * orank, g * orank, (g + 1) * orank);
    });
    ctx.clock.enter(Stage::kAttnProducts);
  } else {
    const int64_t head_blocks = std::clamp<int64_t>((2 * threads + N - 1) / N, 1, H);
    const int64_t hb = (H + head_blocks - 1) / head_blocks;
    const int64_t n_hb = (H + hb - 1) / hb;
    ctx.pool->run(N * n_hb, [&](int64_t task, int thread) {
      const int64_t h0 = (task % n_hb) * hb;
      attend(task / n_hb, h0, std::min(H, h0 + hb), thread);
    });
    ctx.clock.enter(Stage::kAttnProducts);
    const int64_t row_tiles = std::max<int64_t>(1, std::min<int64_t>(orank / 16, (2 * threads + G - 1) / G));
    const int64_t tile = (orank + row_tiles - 1) / row_tiles;
    ctx.pool->run(G * row_tiles, [&](int64_t t, int) {
      const int64_t g = t / row_tiles;
      const int64_t r0 = g * orank + (t % row_tiles) * tile, r1 = std::min(g * orank + orank, r0 + tile);
      if (r0 < r1) w.wo_a.forward_rows(o + g * ig, N, H * hd, rr, G * orank, r0, r1);
    });
  }
  num.bf16(rr, N * G * orank);
  const float* r_in = product_input(num, rr, N * G * orank, ws, kWsQuant);
  w.wo_b.forward(r_in, N, G * orank, out, d, ctx.pool);
  num.bf16(out, N * d);
}

}  // namespace dsinfer::model::deepseek_v4
