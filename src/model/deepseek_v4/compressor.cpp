#include "model/deepseek_v4/compressor.h"

#include <cstring>

#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "model/layers/pool.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

struct EntryTask {
  int32_t seq;
  int64_t g;  // entry index
};

}  // namespace

void compressor_forward(const CompressorWeights& w, const LayerShape& ls, bool indexer, StepContext& ctx,
                        const float* u, const float* sc) {
  const ModelShape& s = *ctx.shape;
  const int64_t r = w.ratio, D = w.width;
  const int64_t cw = (w.overlap ? 2 : 1) * D;

  // Every row into its sequence's tail ring (distinct rows: the ring has room for the whole chunk), in
  // parallel: a prefill's rows are 4-8 KB each per compressed layer, which one thread copied alone.
  // Grain 4, so that a batched decode step's <= 16 rows are not one chunk either.
  ctx.pool->parallel_for(ctx.n_rows(), 4, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const RowInfo& ri = ctx.rows[row];
      PositionRing& tail = indexer ? ctx.layer_state(ri.seq, ls).index_tail : ctx.layer_state(ri.seq, ls).tail;
      const int64_t p = ri.pos;
      float* dst = tail.frow(p);
      std::memcpy(dst, u + row * cw, cw * sizeof(float));
      const float* ape = w.ape.data() + (p % r) * cw;
      for (int64_t c = 0; c < cw; ++c) dst[cw + c] = sc[row * cw + c] + ape[c];
    }
  });
  std::vector<EntryTask> tasks;
  for (int32_t i = 0; i < static_cast<int32_t>(ctx.seqs.size()); ++i) {
    const SeqSlice& q = ctx.seqs[i];
    for (int64_t p = q.start; p < q.start + q.n; ++p)
      if ((p + 1) % r == 0 && p + 1 > q.replay_end) tasks.push_back({i, p / r});
  }
  if (tasks.empty()) return;

  const Numerics& num = s.numerics;
  const int64_t pairs = s.rope_dim / 2;
  const std::vector<float>& freqs = s.rope_freqs[ls.rope];
  ctx.pool->run(static_cast<int64_t>(tasks.size()), [&](int64_t t, int thread) {
    const EntryTask& task = tasks[t];
    const SeqSlice& q = ctx.seqs[task.seq];
    const PositionRing& tail = indexer ? ctx.layer_state(task.seq, ls).index_tail : ctx.layer_state(task.seq, ls).tail;
    // Candidate rows of the entry: group g−1 (overlap mode, A-half = channels [0, D)) then group g
    // (B-half = channels [D, 2D) in overlap mode, all D channels otherwise). Group −1 does not exist.
    // ptrs holds n value pointers followed by n score pointers.
    const int64_t g = task.g;
    const int64_t first = (w.overlap && g > 0) ? (g - 1) * r : g * r;
    const int64_t n = (g + 1) * r - first;
    auto& ptrs = ctx.ws->tptrs(thread);
    ptrs.resize(2 * n);
    for (int64_t p = first; p < (g + 1) * r; ++p) {
      const float* row = tail.frow(p);
      const int64_t half = (w.overlap && p >= g * r) ? D : 0;
      ptrs[p - first] = row + half;
      ptrs[n + p - first] = row + cw + half;
    }
    float* z = ctx.ws->tf(thread, 0, D);
    const int64_t pool_scratch = layers::softmax_pool_scratch(n, D);
    float* scratch = ctx.ws->tf(thread, 1, pool_scratch + 2 * pairs);
    layers::softmax_pool(ptrs.data(), ptrs.data() + n, n, D, layers::PoolOrder::kSoftmaxFirst, z, scratch);
    num.bf16(z, D);
    kernels::rmsnorm(z, w.norm.data(), D, s.eps, z);
    num.bf16(z, D);
    float* cs = scratch + pool_scratch;
    kernels::rope_cos_sin(freqs.data(), pairs, g * r, cs, cs + pairs);
    kernels::rope_rotate(z + D - s.rope_dim, cs, cs + pairs, pairs, false);
    num.bf16(z, D);
    SequenceState& st = *q.state;
    if (indexer) {
      kernels::hadamard_transform(z, D);
      num.bf16(z, D);
      s.key.encode(z, st.writable_entry_key(ls.part, g));
    } else {
      s.kv.encode(z, st.writable_entry_kv(ls.part, g));
    }
  });
}

}  // namespace dsinfer::model::deepseek_v4
