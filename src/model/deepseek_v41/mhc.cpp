#include "model/deepseek_v41/prefill_impl.h"

#include <cmath>

#include "model/layers/mhc.h"

namespace dsinfer::model::deepseek_v41::detail {

// §2.3 HCMix of the current streams (the coefficients and Sinkhorn shared with V4: model/layers/mhc.h).
Prefill::Mix Prefill::hc_mix(const std::string& prefix) const {
  const Vec fn = w_.vec(prefix + "_fn"), base = w_.vec(prefix + "_base"), sc = w_.vec(prefix + "_scale");
  const int64_t mixes = (2 + hc_) * hc_, n = hc_ * d_;
  const double eps = c_.rms_norm_eps, hc_eps = c_.hc_eps;
  Mix m;
  m.pre.resize(static_cast<size_t>(T_ * hc_));
  m.post.resize(static_cast<size_t>(T_ * hc_));
  m.comb.resize(static_cast<size_t>(T_ * hc_ * hc_));
  pool_.parallel_for(T_, 1, [&](int64_t tb, int64_t te) {
    std::vector<double> mix(static_cast<size_t>(mixes));
    for (int64_t t = tb; t < te; ++t) {
      const float* v = X_.data() + t * n;
      const double rho = 1.0 / std::sqrt(dot(v, v, n) / n + eps);
      for (int64_t k = 0; k < mixes; ++k) mix[k] = dot(v, fn.data() + k * n, n) * rho;
      layers::hc_coefficients(mix.data(), sc.data(), base.data(), hc_, c_.hc_sinkhorn_iters, hc_eps,
                              m.pre.data() + t * hc_, m.post.data() + t * hc_, m.comb.data() + t * hc_ * hc_);
    }
  });
  return m;
}

Vec Prefill::stream_mean() const {
  Vec y(static_cast<size_t>(T_ * d_));
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t i = 0; i < d_; ++i) {
      double s = 0;
      for (int64_t j = 0; j < hc_; ++j) s += X_[(t * hc_ + j) * d_ + i];
      y[t * d_ + i] = static_cast<float>(s / hc_);
    }
  }
  return y;
}

Vec Prefill::collapse(const std::vector<double>& pre) const {
  Vec y(static_cast<size_t>(T_ * d_));
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t i = 0; i < d_; ++i) {
      double s = 0;
      for (int64_t j = 0; j < hc_; ++j) s += pre[t * hc_ + j] * X_[(t * hc_ + j) * d_ + i];
      y[t * d_ + i] = static_cast<float>(s);
    }
  }
  return y;
}

// X'[k] = post[k] f + sum_j comb[j][k] X[j].
void Prefill::hc_post(const Vec& f, const Mix& m) {
  Vec& out = Xn_;  // every element written below
  out.resize(X_.size());
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t k = 0; k < hc_; ++k) {
      for (int64_t i = 0; i < d_; ++i) {
        double s = m.post[t * hc_ + k] * f[t * d_ + i];
        for (int64_t j = 0; j < hc_; ++j) s += m.comb[(t * hc_ + j) * hc_ + k] * X_[(t * hc_ + j) * d_ + i];
        out[(t * hc_ + k) * d_ + i] = static_cast<float>(s);
      }
    }
  }
  X_.swap(out);
}

}  // namespace dsinfer::model::deepseek_v41::detail
