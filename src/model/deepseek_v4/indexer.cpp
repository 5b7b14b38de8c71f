#include "model/deepseek_v4/indexer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/hadamard.h"
#include "kernels/cpu/index_score.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/topk.h"
#include "model/deepseek_v4/compressor.h"

namespace dsinfer::model::deepseek_v4 {
namespace {
constexpr int64_t kKeyTile = 256;                // keys decoded at once by one task
constexpr int64_t kMaxScoreFloats = 8 << 20;     // score buffer bound per round of rows
}  // namespace

void indexer_forward(const IndexerWeights& w, const LayerShape& ls, StepContext& ctx, const IndexerInputs& in,
                     int32_t* sel, int32_t* count) {
  const ModelShape& s = *ctx.shape;
  const Numerics& num = s.numerics;
  const int64_t N = ctx.n_rows(), H = s.index_heads, Di = s.index_dim, rd = s.rope_dim, topk = s.index_topk;
  const int64_t r = ls.ratio;

  // Keys of entries finished in this step first: a query sees the entry its own token completes.
  compressor_forward(w.compressor, ls, true, ctx, in.u, in.sc);

  float* qi = in.qi;
  float* wts = in.wts;
  const float head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Di)) / std::sqrt(static_cast<double>(H)));
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      float* qrow = qi + row * H * Di;
      num.bf16(qrow, H * Di);
      for (int64_t h = 0; h < H; ++h) {
        float* qh = qrow + h * Di;
        kernels::rope_rotate(qh + Di - rd, ctx.cos(ls.rope, row), ctx.sin(ls.rope, row), rd / 2, false);
        num.bf16(qh, Di);
        kernels::hadamard_transform(qh, Di);
        num.bf16(qh, Di);
        if (num.kv_qdq) kernels::fp4_block_qdq(qh, Di, 32);
      }
      float* wr = wts + row * H;
      num.bf16(wr, H);
      for (int64_t h = 0; h < H; ++h) wr[h] *= head_scale;
      num.bf16(wr, H);
    }
  });

  // Visible entries per row; rows with at most topk visible take all of them.
  std::vector<int64_t> visible(N);
  for (int64_t row = 0; row < N; ++row) visible[row] = (ctx.rows[row].pos + 1) / r;
  for (int64_t row = 0; row < N; ++row) {
    if (visible[row] <= topk) {
      count[row] = static_cast<int32_t>(visible[row]);
      std::iota(sel + row * topk, sel + row * topk + visible[row], 0);
    }
  }

  int64_t row0 = 0;
  while (row0 < N) {
    // A round of rows whose score vectors fit the bound.
    int64_t row1 = row0, floats = 0;
    std::vector<int64_t> offset;
    while (row1 < N && (row1 == row0 || floats + visible[row1] <= kMaxScoreFloats)) {
      offset.push_back(floats);
      if (visible[row1] > topk) floats += visible[row1];
      ++row1;
    }
    float* scores = ctx.ws->f(kWsScores, std::max<int64_t>(floats, 1));
    struct Tile { int64_t row, begin, end; };
    std::vector<Tile> tiles;
    for (int64_t row = row0; row < row1; ++row) {
      if (visible[row] <= topk) continue;
      for (int64_t t = 0; t < visible[row]; t += kKeyTile) tiles.push_back({row, t, std::min(visible[row], t + kKeyTile)});
    }
    ctx.pool->run(static_cast<int64_t>(tiles.size()), [&](int64_t ti, int thread) {
      const Tile& tile = tiles[ti];
      const SequenceState& st = *ctx.seqs[ctx.rows[tile.row].seq].state;
      float* keys = ctx.ws->tf(thread, 2, kKeyTile * Di);
      for (int64_t g = tile.begin; g < tile.end; ++g) s.key.decode(st.entry_key(ls.part, g), keys + (g - tile.begin) * Di);
      kernels::index_scores(qi + tile.row * H * Di, wts + tile.row * H, H, Di, keys, tile.end - tile.begin,
                            scores + offset[tile.row - row0] + tile.begin);
    });
    ctx.pool->run(row1 - row0, [&](int64_t k, int thread) {
      const int64_t row = row0 + k;
      if (visible[row] <= topk) return;
      float* sc = scores + offset[k];
      num.bf16(sc, visible[row]);
      count[row] = static_cast<int32_t>(
          kernels::topk_indices(sc, visible[row], topk, sel + row * topk, ctx.ws->tvec(thread)));
    });
    row0 = row1;
  }
}

}  // namespace dsinfer::model::deepseek_v4
