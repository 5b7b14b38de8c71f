#include "model/deepseek_v4/mhc.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/stream_mix.h"

namespace dsinfer::model::deepseek_v4 {
namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

void sinkhorn(float* c, int64_t hc, int64_t iters, float eps) {
  for (int64_t j = 0; j < hc; ++j) {
    float* row = c + j * hc;
    const float m = *std::max_element(row, row + hc);
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - m);
      sum += row[k];
    }
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
      const float den = sum + eps;
      for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= den;
    }
  };
  normalise_columns();
  for (int64_t it = 1; it < iters; ++it) {
    for (int64_t j = 0; j < hc; ++j) {
      float* row = c + j * hc;
      float sum = 0.0f;
      for (int64_t k = 0; k < hc; ++k) sum += row[k];
      const float den = sum + eps;
      for (int64_t k = 0; k < hc; ++k) row[k] /= den;
    }
    normalise_columns();
  }
}

void hc_mix(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* pre, float* post, float* comb) {
  const ModelShape& s = *ctx.shape;
  const int64_t hc = s.hc, hd = s.hc_dim(), M = s.mixes();
  float* mixes = ctx.ws->f(kWsMix, N * M);
  // The projection uses the raw streams; the one RMS statistic over all hc·d values scales it after.
  w.fn.forward(X, N, hd, mixes, M, ctx.pool);
  ctx.pool->parallel_for(N, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* m = mixes + r * M;
      const float rho = kernels::rms_inv(X + r * hd, hd, s.eps);
      for (int64_t i = 0; i < M; ++i) m[i] *= rho;
      for (int64_t j = 0; j < hc; ++j) {
        pre[r * hc + j] = sigmoid(m[j] * w.scale[0] + w.base[j]) + s.hc_eps;
        post[r * hc + j] = 2.0f * sigmoid(m[hc + j] * w.scale[1] + w.base[hc + j]);
      }
      float* c = comb + r * hc * hc;
      for (int64_t i = 0; i < hc * hc; ++i) c[i] = m[2 * hc + i] * w.scale[2] + w.base[2 * hc + i];
      sinkhorn(c, hc, s.sinkhorn_iters, s.hc_eps);
    }
  });
}

void hc_head(const HcWeights& w, StepContext& ctx, const float* X, int64_t N, float* y) {
  const ModelShape& s = *ctx.shape;
  const int64_t hc = s.hc, hd = s.hc_dim(), d = s.dim;
  float* mixes = ctx.ws->f(kWsMix, N * hc);
  w.fn.forward(X, N, hd, mixes, hc, ctx.pool);
  ctx.pool->parallel_for(N, 16, [&](int64_t b, int64_t e) {
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
