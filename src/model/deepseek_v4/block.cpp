#include "model/deepseek_v4/block.h"

#include <algorithm>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/stream_mix.h"
#include "model/deepseek_v4/attention.h"
#include "model/deepseek_v4/mhc.h"
#include "model/deepseek_v4/moe.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

// (pre, post, comb) from the streams, the pre-mixed and normalised sub-layer input, the sub-layer,
// then the streams updated with post · f + combᵀ · X.
template <typename SubLayer>
void residual_site(const HcWeights& hc, const std::vector<float>& norm, StepContext& ctx, float* X, SubLayer&& sub) {
  const ModelShape& s = *ctx.shape;
  const int64_t N = ctx.n_rows(), H = s.hc, d = s.dim, hd = s.hc_dim();
  Workspace& ws = *ctx.ws;
  float* pre = ws.f(kWsPre, N * H);
  float* post = ws.f(kWsPost, N * H);
  float* comb = ws.f(kWsComb, N * H * H);
  ctx.clock.enter(Stage::kMhc);
  hc_mix(hc, ctx, X, N, pre, post, comb);
  float* in = ws.f(kWsSub, N * d);
  ctx.pool->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      kernels::hc_combine(X + r * hd, pre + r * H, H, d, in + r * d);
      s.numerics.bf16(in + r * d, d);
      kernels::rmsnorm(in + r * d, norm.data(), d, s.eps, in + r * d);
      s.numerics.bf16(in + r * d, d);
    }
  });
  float* f = ws.f(kWsSubOut, N * d);
  sub(in, f);
  ctx.clock.enter(Stage::kMhc);
  float* X2 = ws.f(kWsX2, N * hd);
  ctx.pool->parallel_for(N, 8, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      kernels::hc_expand(f + r * d, X + r * hd, post + r * H, comb + r * H * H, H, d, X2 + r * hd);
      s.numerics.bf16(X2 + r * hd, hd);
      // Row r of X is read only by row r's expand: the copy back belongs to the row's task (one serial
      // copy of all rows was 6.6 MB per 16-row MEDIUM step).
      std::copy(X2 + r * hd, X2 + (r + 1) * hd, X + r * hd);
    }
  });
}

}  // namespace

void block_forward(const BlockWeights& w, const LayerShape& ls, StepContext& ctx, float* X) {
  residual_site(w.hc_attn, w.attn_norm, ctx, X,
                [&](const float* a, float* out) { attention_forward(w.attn, ls, ctx, a, out); });
  residual_site(w.hc_ffn, w.ffn_norm, ctx, X, [&](const float* f, float* out) {
    ctx.clock.enter(Stage::kFfn);
    moe_forward(w.ffn, ls, ctx, f, out);
  });
}

}  // namespace dsinfer::model::deepseek_v4
