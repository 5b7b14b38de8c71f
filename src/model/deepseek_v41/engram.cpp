#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>
#include <cmath>

namespace dsinfer::model::deepseek_v41::detail {

// §2.15.
void Prefill::engram(int64_t L, int64_t k) {
  const std::string p = c_.layer_prefix(L) + "engram.";
  const EngramConfig& e = *c_.engram;
  const int64_t C = e.columns(), hd = e.head_dim;
  Vec emb(static_cast<size_t>(T_ * C * hd));
  for (const Segment& g : segs_) g.seq->engram_rows(p, k, emb.data() + g.row0 * C * hd);
  const Vec kv = matmul(pool_, emb, T_, w_.linear(p + "wkv"));  // [T, (hc + 1) d]
  const Vec qw = w_.vec(p + "q_weight"), kw = w_.vec(p + "k_weight");
  const double eps = c_.rms_norm_eps;
  const int64_t width = (hc_ + 1) * d_;
  for (int64_t t = 0; t < T_; ++t) {
    const float* value = kv.data() + t * width + hc_ * d_;
    for (int64_t j = 0; j < hc_; ++j) {
      float* x = X_.data() + (t * hc_ + j) * d_;
      const float* key = kv.data() + t * width + j * d_;
      double xx = 0, kk = 0, s = 0;
      for (int64_t i = 0; i < d_; ++i) {
        xx += static_cast<double>(x[i]) * x[i];
        kk += static_cast<double>(key[i]) * key[i];
        s += static_cast<double>(x[i]) * (static_cast<double>(qw[j * d_ + i]) * kw[j * d_ + i]) * key[i];
      }
      const double rho = 1.0 / std::sqrt(xx / d_ + eps) / std::sqrt(kk / d_ + eps);
      const double dt = s * rho / std::sqrt(static_cast<double>(d_));
      const double root = std::sqrt(std::max(std::fabs(dt), 1e-6));
      const double g = sigmoid(std::signbit(dt) ? -root : root);
      for (int64_t i = 0; i < d_; ++i) x[i] = static_cast<float>(x[i] + g * value[i]);
    }
  }
}

// The Engram table rows [T, C, hd] of this sequence's chunk, from its n-gram history.
void Prefill::engram_rows(const std::string& p, int64_t k, float* emb) const {
  const EngramConfig& e = *c_.engram;
  const int64_t C = e.columns(), hd = e.head_dim, N = e.max_ngram_size;
  std::vector<int64_t> hist(static_cast<size_t>(N)), rows(static_cast<size_t>(C));
  for (int64_t t = 0; t < T_; ++t) {
    const int64_t pos = pos0_ + t;  // the n-grams look back across chunks (§2.13)
    for (int64_t j = 0; j < N; ++j) hist[j] = pos - j >= 0 ? cid_[pos - j] : hash_->pad_id();
    hash_->rows(k, hist.data(), rows.data());
    for (int64_t col = 0; col < C; ++col) w_.engram_row(p, rows[col], emb + (t * C + col) * hd);
  }
}

}  // namespace dsinfer::model::deepseek_v41::detail
