#include "model/deepseek_v4/mhc.h"

#include <cmath>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/stream_mix.h"
#include "model/layers/mhc.h"

namespace dsinfer::model::deepseek_v4 {
namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void hc_mix(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* pre, float* post, float* comb) {
  const ModelShape& s = *ctx.shape;
  const int64_t hc = s.hc, hd = s.hc_dim(), M = s.mixes();
  float* mixes = ctx.ws->f(kWsMix, N * M);
  // The projection uses the raw streams; the one RMS statistic over all hc·d values scales it after.
  w.fn.forward(X, N, hd, mixes, M, ctx.pool);
  // Grain 4: a row's RMS over hc·d values and its Sinkhorn iterations take microseconds, and at a
  // grain of 16 a batched decode step of up to 16 rows ran them all on one thread (2.2 ms of serial
  // time per 16-row MEDIUM step, bench-forward --breakdown).
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* m = mixes + r * M;
      const float rho = kernels::rms_inv(X + r * hd, hd, s.eps);
      for (int64_t i = 0; i < M; ++i) m[i] *= rho;
      layers::hc_coefficients(m, w.scale.data(), w.base.data(), hc, s.sinkhorn_iters, s.hc_eps, pre + r * hc,
                              post + r * hc, comb + r * hc * hc);
    }
  });
}

void hc_head(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* y) {
  const ModelShape& s = *ctx.shape;
  const int64_t hc = s.hc, hd = s.hc_dim(), d = s.dim;
  float* mixes = ctx.ws->f(kWsMix, N * hc);
  w.fn.forward(X, N, hd, mixes, hc, ctx.pool);
  ctx.pool->parallel_for(N, 4, [&](int64_t b, int64_t e) {  // grain: as hc_mix's
    float pre[64];
    for (int64_t r = b; r < e; ++r) {
      const float rho = kernels::rms_inv(X + r * hd, hd, s.eps);
      for (int64_t j = 0; j < hc; ++j) pre[j] = sigmoid(mixes[r * hc + j] * rho * w.scale[0] + w.base[j]) + s.hc_eps;
      kernels::hc_combine(X + r * hd, pre, hc, d, y + r * d);
      s.numerics.bf16(y + r * d, d);
    }
  });
}

}  // namespace dsinfer::model::deepseek_v4
