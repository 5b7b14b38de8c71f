#include "model/deepseek_v41/prefill.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>

#include "core/dtypes.h"
#include "core/error.h"
#include "model/deepseek_v41/engram_hash.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using core::DType;
using Vec = std::vector<float>;

// A linear weight decoded to fp32 [rows, cols].
struct Dense {
  int64_t rows = 0, cols = 0;
  Vec w;
  const float* row(int64_t r) const { return w.data() + r * cols; }
};

class Weights {
 public:
  explicit Weights(const Checkpoint& ck) : ck_(ck), block_(ck.config().weight_block) {}

  Dense linear(const std::string& prefix) const {
    const TensorView& t = ck_.get(prefix + ".weight");
    Dense d;
    d.rows = t.shape.at(0);
    switch (t.dtype) {
      case DType::kBF16:
      case DType::kF32:
        d.cols = t.shape.at(1);
        d.w = plain(t);
        return d;
      case DType::kF8E4M3: {
        d.cols = t.shape.at(1);
        const TensorView& s = ck_.get(prefix + ".scale");
        const int64_t scols = (d.cols + block_ - 1) / block_;
        d.w.resize(static_cast<size_t>(d.rows * d.cols));
        for (int64_t r = 0; r < d.rows; ++r) {
          for (int64_t c = 0; c < d.cols; ++c) {
            d.w[r * d.cols + c] = core::fp8_e4m3_to_float(t.data[r * d.cols + c]) *
                                  scale(s, (r / block_) * scols + c / block_);
          }
        }
        return d;
      }
      case DType::kI8:
      case DType::kU8: {
        d.cols = t.shape.at(1) * 2;
        const TensorView& s = ck_.get(prefix + ".scale");
        d.w.resize(static_cast<size_t>(d.rows * d.cols));
        for (int64_t r = 0; r < d.rows; ++r) {
          const uint8_t* packed = t.data + r * (d.cols / 2);
          for (int64_t c = 0; c < d.cols; ++c) {
            d.w[r * d.cols + c] = core::fp4_packed_get(packed, c) * scale(s, r * (d.cols / 32) + c / 32);
          }
        }
        return d;
      }
      default:
        core::fail("V4.1 prefill: weight '", t.name, "' has an unsupported dtype");
    }
  }

  Vec vec(const std::string& name) const { return plain(ck_.get(name)); }

  // Rows of a BF16 table (embeddings).
  Vec rows(const std::string& name, const std::vector<int64_t>& ids) const {
    const TensorView& t = ck_.get(name);
    DSINFER_CHECK(t.dtype == DType::kBF16, "V4.1 prefill: '", name, "' must be BF16");
    const int64_t cols = t.shape.at(1);
    Vec out(static_cast<size_t>(ids.size()) * cols);
    for (size_t i = 0; i < ids.size(); ++i) {
      DSINFER_CHECK(ids[i] >= 0 && ids[i] < t.shape[0], "V4.1 prefill: row ", ids[i], " of '", name, "' out of range");
      for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = core::bf16_to_float(t.as<uint16_t>()[ids[i] * cols + c]);
    }
    return out;
  }

  // Engram table rows: E4M3 value x E8M0 scale per row and 32 columns (§4.3), read row by row.
  void engram_row(const std::string& prefix, int64_t row, float* out) const {
    const TensorView& t = ck_.get(prefix + "embed.weight");
    const TensorView& s = ck_.get(prefix + "embed.scale");
    const int64_t cols = t.shape.at(1);
    DSINFER_CHECK(row >= 0 && row < t.shape[0], "V4.1 prefill: Engram row ", row, " out of range");
    for (int64_t c = 0; c < cols; ++c) {
      out[c] = core::fp8_e4m3_to_float(t.data[row * cols + c]) * scale(s, row * (cols / 32) + c / 32);
    }
  }

 private:
  static float scale(const TensorView& s, int64_t i) {
    return s.dtype == DType::kF32 ? s.as<float>()[i] : core::e8m0_to_float(s.data[i]);
  }
  static Vec plain(const TensorView& t) {
    Vec out(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::kBF16) {
      for (int64_t i = 0; i < t.numel(); ++i) out[i] = core::bf16_to_float(t.as<uint16_t>()[i]);
    } else {
      DSINFER_CHECK(t.dtype == DType::kF32, "V4.1 prefill: '", t.name, "' must be BF16 or F32");
      std::copy(t.as<float>(), t.as<float>() + t.numel(), out.begin());
    }
    return out;
  }

  const Checkpoint& ck_;
  int64_t block_;
};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Y [T, out] = X [T, in] W^T.
Vec matmul(core::ThreadPool& pool, const Vec& x, int64_t T, const Dense& w) {
  DSINFER_CHECK(static_cast<int64_t>(x.size()) == T * w.cols, "V4.1 prefill: matmul shape mismatch");
  Vec y(static_cast<size_t>(T * w.rows));
  pool.parallel_for(w.rows, 64, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      for (int64_t t = 0; t < T; ++t) y[t * w.rows + r] = static_cast<float>(dot(x.data() + t * w.cols, w.row(r), w.cols));
    }
  });
  return y;
}

// Row-wise RMSNorm over the last dim n (weight may be empty: no weight).
Vec rms_norm(const Vec& x, int64_t n, const Vec& weight, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    const float* v = x.data() + r * n;
    const double inv = 1.0 / std::sqrt(dot(v, v, n) / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(v[i] * inv * (weight.empty() ? 1.0 : weight[i]));
  }
  return y;
}

// §2.4.1: the fp32 inverse frequencies of a layer (ratio 0: rope_theta, no YaRN; else compressed with YaRN).
std::vector<float> inv_freqs(const ModelConfig& c, int64_t ratio) {
  const int64_t rd = c.qk_rope_head_dim;
  const double base = ratio ? c.compress_rope_theta : c.rope_theta;
  std::vector<float> f(static_cast<size_t>(rd / 2));
  for (int64_t i = 0; i < rd / 2; ++i) {
    f[i] = 1.0f / std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(rd));
  }
  if (ratio && c.rope_scaling && c.rope_scaling->original_max_position_embeddings > 0) {
    const auto& y = *c.rope_scaling;
    auto corr = [&](double rot) {
      return rd * std::log(y.original_max_position_embeddings / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    const double low = std::max(std::floor(corr(y.beta_fast)), 0.0);
    const double high = std::min(std::ceil(corr(y.beta_slow)), static_cast<double>(rd - 1));
    for (int64_t i = 0; i < rd / 2; ++i) {
      const float ramp = std::clamp(static_cast<float>((i - low) / std::max(high - low, 0.001)), 0.0f, 1.0f);
      const float s = 1.0f - ramp;
      f[i] = (f[i] / static_cast<float>(y.factor)) * (1.0f - s) + f[i] * s;
    }
  }
  return f;
}

// Interleaved RoPE on the last rd dims of a vector of n dims at position pos (sign -1: inverse).
void rope(float* v, int64_t n, int64_t rd, const std::vector<float>& f, int64_t pos, double sign = 1.0) {
  float* tail = v + n - rd;
  for (int64_t i = 0; i < rd / 2; ++i) {
    const double a = sign * static_cast<double>(pos) * static_cast<double>(f[i]);
    const double c = std::cos(a), s = std::sin(a);
    const double xr = tail[2 * i], xi = tail[2 * i + 1];
    tail[2 * i] = static_cast<float>(xr * c - xi * s);
    tail[2 * i + 1] = static_cast<float>(xr * s + xi * c);
  }
}

// §2.10 QDQs on a vector of n dims.
void qdq_pow2(float* v, int64_t n, int64_t block, bool fp8) {
  for (int64_t b = 0; b < n; b += block) {
    float amax = 0;
    for (int64_t i = b; i < b + block; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float s = core::e8m0_to_float(fp8 ? core::e8m0_scale_code(amax, core::kFp8Max, core::kFp8AmaxFloor)
                                            : core::e8m0_scale_code(amax, core::kFp4Max, core::kFp4AmaxFloor));
    for (int64_t i = b; i < b + block; ++i) {
      const float q = v[i] / s;  // a power of two: exact
      v[i] = (fp8 ? core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(q))
                  : core::fp4_e2m1_to_float(core::float_to_fp4_e2m1(std::clamp(q, -6.0f, 6.0f)))) * s;
    }
  }
}

void qdq_fp4_e4m3_scale(float* v, int64_t n) {
  for (int64_t b = 0; b < n; b += 16) {
    float amax = 0;
    for (int64_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(v[i]));
    amax = std::max(amax, 6.0f * 0.001953125f);  // 6 * 2^-9
    const float s = core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(std::min(amax / 6.0f, 448.0f)));
    for (int64_t i = b; i < b + 16; ++i) {
      const double q = std::clamp(static_cast<double>(v[i]) / s, -6.0, 6.0);
      v[i] = core::fp4_e2m1_to_float(core::float_to_fp4_e2m1(static_cast<float>(q))) * s;
    }
  }
}

// Indices of the k largest finite values; exact ties go to the lower index.
std::vector<int64_t> topk(const std::vector<double>& score, int64_t k) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  std::vector<int64_t> out;
  for (int64_t i = 0; i < static_cast<int64_t>(idx.size()) && static_cast<int64_t>(out.size()) < k; ++i) {
    if (std::isfinite(score[idx[i]]) || score[idx[i]] > 0) out.push_back(idx[i]);
  }
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

class Prefill {
 public:
  Prefill(const Checkpoint& ck, const EngramTokenMap* map, const std::vector<int32_t>& ids, const PrefillOptions& o)
      : c_(ck.config()), w_(ck), ids_(ids), T_(static_cast<int64_t>(ids.size())), opt_(o),
        pool_(o.pool ? *o.pool : core::ThreadPool::global()), hc_(c_.hc_mult), d_(c_.hidden_size) {
    DSINFER_CHECK(c_.arch == Architecture::kDeepseekV41, "V4.1 prefill: the checkpoint is ", c_.architecture);
    DSINFER_CHECK(T_ > 0, "V4.1 prefill: empty prompt");
    for (int32_t id : ids) DSINFER_CHECK(id >= 0 && id < c_.vocab_size, "V4.1 prefill: token id ", id, " out of range");
    if (c_.engram) {
      DSINFER_CHECK(map != nullptr, "V4.1 prefill: the model has Engram layers but no token map was given");
      hash_ = std::make_unique<EngramHash>(*c_.engram, map->compressed(c_.engram->pad_token_id));
      for (int32_t id : ids) cid_.push_back(map->compressed(id));
    }
  }

  // §2.12 teacher-forced draft rounds after the main pass: for every p < T-1 the round after p with
  // anchor ids[p+1]; returns the logits of draft 0 [T-1, vocab] (predicting token p+2).
  Vec dspark_draft0() {
    DSINFER_CHECK(c_.dspark && c_.n_mtp_layers > 0, "V4.1 prefill: the model has no DSpark stages");
    DSINFER_CHECK(T_ >= 2, "V4.1 DSpark: needs at least 2 prompt tokens");
    const int64_t P = T_ - 1, B = c_.dspark->block_size, hd = c_.head_dim, rd = c_.qk_rope_head_dim;
    const int64_t nt = static_cast<int64_t>(taps_.size());
    Vec hidden(static_cast<size_t>(T_ * nt * d_));
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t i = 0; i < nt; ++i) std::copy_n(taps_[i].data() + t * d_, d_, hidden.data() + (t * nt + i) * d_);
    }
    const Vec main_x = rms_norm(matmul(pool_, hidden, T_, w_.linear("mtp.0.main_proj")), d_,
                                w_.vec("mtp.0.main_norm.weight"), c_.rms_norm_eps);
    const std::vector<float> f = inv_freqs(c_, 0);
    rings_.clear();
    for (int64_t s = 0; s < c_.n_mtp_layers; ++s) {
      const std::string p = core::str_cat("mtp.", s, ".attn.");
      Vec ring = rms_norm(matmul(pool_, main_x, T_, w_.linear(p + "wkv")), hd, w_.vec(p + "kv_norm.weight"),
                          c_.rms_norm_eps);
      for (int64_t t = 0; t < T_; ++t) {
        rope(ring.data() + t * hd, hd, rd, f, t);
        if (opt_.qdq) qdq_pow2(ring.data() + t * hd, hd, 32, true);
      }
      rings_.push_back(std::move(ring));
    }
    // The draft blocks of all rounds as rows p * B + k (rounds are independent).
    ring_len_ = T_;
    block_ = B;
    std::vector<int64_t> block_ids(static_cast<size_t>(P * B), c_.dspark->noise_token_id);
    for (int64_t p = 0; p < P; ++p) block_ids[p * B] = ids_[p + 1];
    const Vec e = w_.rows("embed.weight", block_ids);
    T_ = P * B;
    X_.assign(static_cast<size_t>(T_ * hc_ * d_), 0.0f);
    for (int64_t n = 0; n < T_; ++n) {
      for (int64_t j = 0; j < hc_; ++j) std::copy_n(e.data() + n * d_, d_, X_.data() + (n * hc_ + j) * d_);
    }
    std::vector<double> pre_in(static_cast<size_t>(T_ * hc_), 0.0);
    for (int64_t n = 0; n < T_; ++n) pre_in[n * hc_] = 1.0;
    for (int64_t s = 0; s < c_.n_mtp_layers; ++s) pre_in = block(c_.num_hidden_layers + s, pre_in);
    const Vec h = collapse(pre_in);
    Vec h0(static_cast<size_t>(P * d_));
    for (int64_t p = 0; p < P; ++p) std::copy_n(h.data() + (p * B) * d_, d_, h0.data() + p * d_);
    const std::string last = core::str_cat("mtp.", c_.n_mtp_layers - 1, ".");
    Vec logits = matmul(pool_, rms_norm(h0, d_, w_.vec(last + "norm.weight"), c_.rms_norm_eps), P, w_.linear("head"));
    // Markov bias of draft 0: conditioned on the anchor (o_0 = ids[p+1]).
    std::vector<int64_t> anchors(ids_.begin() + 1, ids_.end());
    const Vec emb = w_.rows(last + "markov_head.embed.weight", anchors);
    const Vec bias = matmul(pool_, emb, P, w_.linear(last + "markov_head.head"));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(static_cast<double>(logits[i]) + bias[i]);
    return logits;
  }

  Vec run() {
    std::vector<int64_t> ids64(ids_.begin(), ids_.end());
    const Vec e = w_.rows("embed.weight", ids64);
    X_.assign(static_cast<size_t>(T_ * hc_ * d_), 0.0f);
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t j = 0; j < hc_; ++j) std::copy_n(e.data() + t * d_, d_, X_.data() + (t * hc_ + j) * d_);
    }
    std::vector<double> pre_in(static_cast<size_t>(T_ * hc_), 0.0);
    for (int64_t t = 0; t < T_; ++t) pre_in[t * hc_] = 1.0;  // one-hot on stream 0 (§2.1)
    for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
      const LayerRoles& r = c_.layer_roles(L);
      if (r.engram >= 0) engram(L, r.engram);
      if (r.dspark_target) taps_.push_back(stream_mean());  // layer order (§2.1)
      pre_in = block(L, pre_in);
    }
    Vec y = rms_norm(collapse(pre_in), d_, w_.vec("norm.weight"), c_.rms_norm_eps);
    return matmul(pool_, y, T_, w_.linear("head"));
  }

 private:
  struct Mix {
    std::vector<double> pre, post, comb;  // [T, hc], [T, hc], [T, hc, hc]
  };

  // §2.3 HCMix of the current streams.
  Mix hc_mix(const std::string& prefix) const {
    const Vec fn = w_.vec(prefix + "_fn"), base = w_.vec(prefix + "_base"), sc = w_.vec(prefix + "_scale");
    const int64_t mixes = (2 + hc_) * hc_, n = hc_ * d_;
    const double eps = c_.rms_norm_eps, hc_eps = c_.hc_eps;
    Mix m;
    m.pre.resize(static_cast<size_t>(T_ * hc_));
    m.post.resize(static_cast<size_t>(T_ * hc_));
    m.comb.resize(static_cast<size_t>(T_ * hc_ * hc_));
    pool_.parallel_for(T_, 1, [&](int64_t tb, int64_t te) {
      std::vector<double> mix(static_cast<size_t>(mixes)), cb(static_cast<size_t>(hc_ * hc_));
      for (int64_t t = tb; t < te; ++t) {
        const float* v = X_.data() + t * n;
        const double rho = 1.0 / std::sqrt(dot(v, v, n) / n + eps);
        for (int64_t k = 0; k < mixes; ++k) mix[k] = dot(v, fn.data() + k * n, n) * rho;
        for (int64_t j = 0; j < hc_; ++j) {
          m.pre[t * hc_ + j] = sigmoid(mix[j] * sc[0] + base[j]) + hc_eps;
          m.post[t * hc_ + j] = 2 * sigmoid(mix[hc_ + j] * sc[1] + base[hc_ + j]);
        }
        for (int64_t k = 0; k < hc_ * hc_; ++k) cb[k] = mix[2 * hc_ + k] * sc[2] + base[2 * hc_ + k];
        // Sinkhorn (V4 §2.3.1): row softmax + eps, column normalisation, then iters-1 x (row, column).
        for (int64_t a = 0; a < hc_; ++a) {
          double mx = -INFINITY, s = 0;
          for (int64_t b = 0; b < hc_; ++b) mx = std::max(mx, cb[a * hc_ + b]);
          for (int64_t b = 0; b < hc_; ++b) s += std::exp(cb[a * hc_ + b] - mx);
          for (int64_t b = 0; b < hc_; ++b) cb[a * hc_ + b] = std::exp(cb[a * hc_ + b] - mx) / s + hc_eps;
        }
        auto cols = [&] {
          for (int64_t b = 0; b < hc_; ++b) {
            double s = 0;
            for (int64_t a = 0; a < hc_; ++a) s += cb[a * hc_ + b];
            for (int64_t a = 0; a < hc_; ++a) cb[a * hc_ + b] /= s + hc_eps;
          }
        };
        auto rows = [&] {
          for (int64_t a = 0; a < hc_; ++a) {
            double s = 0;
            for (int64_t b = 0; b < hc_; ++b) s += cb[a * hc_ + b];
            for (int64_t b = 0; b < hc_; ++b) cb[a * hc_ + b] /= s + hc_eps;
          }
        };
        cols();
        for (int64_t it = 1; it < c_.hc_sinkhorn_iters; ++it) {
          rows();
          cols();
        }
        std::copy(cb.begin(), cb.end(), m.comb.begin() + t * hc_ * hc_);
      }
    });
    return m;
  }

  Vec stream_mean() const {
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

  Vec collapse(const std::vector<double>& pre) const {
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
  void hc_post(const Vec& f, const Mix& m) {
    Vec out(X_.size());
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

  // §2.2: returns this block's FFN pre.
  std::vector<double> block(int64_t L, const std::vector<double>& pre_in) {
    const std::string p = c_.layer_prefix(L);
    const Mix ma = hc_mix(p + "hc_attn");
    const Vec a = rms_norm(collapse(pre_in), d_, w_.vec(p + "attn_norm.weight"), c_.rms_norm_eps);
    hc_post(L < c_.num_hidden_layers ? attention(L, a) : stage_attention(L, a), ma);
    const Mix mf = hc_mix(p + "hc_ffn");
    const Vec f = rms_norm(collapse(ma.pre), d_, w_.vec(p + "ffn_norm.weight"), c_.rms_norm_eps);
    hc_post(moe(p + "ffn.", f, c_.experts_per_tok_of(L)), mf);
    return mf.pre;
  }

  // §2.15.
  void engram(int64_t L, int64_t k) {
    const std::string p = c_.layer_prefix(L) + "engram.";
    const EngramConfig& e = *c_.engram;
    const int64_t C = e.columns(), hd = e.head_dim, N = e.max_ngram_size;
    Vec emb(static_cast<size_t>(T_ * C * hd));
    std::vector<int64_t> hist(static_cast<size_t>(N)), rows(static_cast<size_t>(C));
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t j = 0; j < N; ++j) hist[j] = t - j >= 0 ? cid_[t - j] : hash_->pad_id();
      hash_->rows(k, hist.data(), rows.data());
      for (int64_t col = 0; col < C; ++col) w_.engram_row(p, rows[col], emb.data() + (t * C + col) * hd);
    }
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

  struct KvSource {
    int64_t ratio = 0;
    Vec ckv;  // [G, hd]
    Vec ik;   // [G, index_dim]
    int64_t G = 0;
  };

  // §2.6: a kv source's compressed entries over the whole sequence.
  KvSource compress(const std::string& p, const Vec& a, int64_t ratio) {
    const int64_t hd = c_.head_dim, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
    KvSource s;
    s.ratio = ratio;
    s.G = T_ / ratio;
    const Vec u = matmul(pool_, a, T_, w_.linear(p + "compressor.wkv"));
    Vec z(static_cast<size_t>(s.G * hd));
    if (ratio == 2) {
      const Vec g = matmul(pool_, a, T_, w_.linear(p + "compressor.wgate"));
      for (int64_t e = 0; e < s.G; ++e) {
        for (int64_t ch = 0; ch < hd; ++ch) {
          const double s0 = g[(2 * e) * hd + ch], s1 = g[(2 * e + 1) * hd + ch];
          const double mx = std::max(s0, s1), e0 = std::exp(s0 - mx), e1 = std::exp(s1 - mx);
          z[e * hd + ch] = static_cast<float>((e0 * u[(2 * e) * hd + ch] + e1 * u[(2 * e + 1) * hd + ch]) / (e0 + e1));
        }
      }
    } else {
      std::copy_n(u.begin(), s.G * hd, z.begin());
    }
    const Vec latent = rms_norm(z, hd, w_.vec(p + "compressor.norm.weight"), c_.rms_norm_eps);
    const std::vector<float> f = inv_freqs(c_, ratio);
    s.ik = rms_norm(matmul(pool_, latent, s.G, w_.linear(p + "indexer.wk")), ixd, w_.vec(p + "indexer.k_norm.weight"),
                    c_.rms_norm_eps);
    s.ckv = latent;
    for (int64_t e = 0; e < s.G; ++e) {
      rope(s.ik.data() + e * ixd, ixd, rd, f, e * ratio);
      rope(s.ckv.data() + e * hd, hd, rd, f, e * ratio);
      if (opt_.qdq) {
        qdq_pow2(s.ik.data() + e * ixd, ixd, 32, false);
        qdq_fp4_e4m3_scale(s.ckv.data() + e * hd, hd);
      }
    }
    return s;
  }

  // §2.7.2 scores [T][G] (-inf where not visible) of an index source.
  std::vector<std::vector<double>> index_scores(const std::string& p, const Vec& a, const Vec& qr, const KvSource& src,
                                                const std::vector<float>& f) {
    const int64_t ixh = c_.index_n_heads, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
    Vec qi = matmul(pool_, qr, T_, w_.linear(p + "indexer.wq_b"));  // [T, ixh * ixd]
    const Vec wts = matmul(pool_, a, T_, w_.linear(p + "indexer.weights_proj"));  // [T, ixh]
    const double wscale = 1.0 / std::sqrt(static_cast<double>(ixd)) / std::sqrt(static_cast<double>(ixh));
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t h = 0; h < ixh; ++h) {
        float* q = qi.data() + (t * ixh + h) * ixd;
        rope(q, ixd, rd, f, t);
        if (opt_.qdq) qdq_pow2(q, ixd, 32, false);
      }
    }
    std::vector<std::vector<double>> score(static_cast<size_t>(T_), std::vector<double>(src.G, -INFINITY));
    pool_.parallel_for(T_, 4, [&](int64_t tb, int64_t te) {
      for (int64_t t = tb; t < te; ++t) {
        const int64_t n = std::min(src.G, (t + 1) / src.ratio);
        for (int64_t g = 0; g < n; ++g) {
          double s = 0;
          for (int64_t h = 0; h < ixh; ++h) {
            const double dq = dot(qi.data() + (t * ixh + h) * ixd, src.ik.data() + g * ixd, ixd);
            s += std::max(dq, 0.0) * (wts[t * ixh + h] * wscale);
          }
          score[t][g] = s;
        }
      }
    });
    return score;
  }

  // §2.8: candidate mask [T][G] of the candidate source.
  std::vector<std::vector<bool>> candidates(const std::vector<std::vector<double>>& score, int64_t G, int64_t ratio) {
    const int64_t B = c_.candidate_block_size, K = c_.candidate_topk_blocks;
    std::vector<std::vector<bool>> mask(static_cast<size_t>(T_), std::vector<bool>(G, false));
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = std::min(G, (t + 1) / ratio);
      if (n == 0) continue;
      const int64_t nb = (n + B - 1) / B;
      std::vector<double> bs(static_cast<size_t>(nb), -INFINITY);
      for (int64_t g = 0; g < n; ++g) bs[g / B] = std::max(bs[g / B], score[t][g]);
      bs[(n - 1) / B] = INFINITY;  // the block of the newest visible entry is always kept
      for (int64_t b : topk(bs, K)) {
        for (int64_t g = b * B; g < std::min(n, b * B + B); ++g) mask[t][g] = true;
      }
    }
    return mask;
  }

  Vec attention(int64_t L, const Vec& a) {
    const LayerRoles& r = c_.layer_roles(L);
    const std::string p = c_.layer_prefix(L) + "attn.";
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim, W = c_.sliding_window;
    const std::vector<float> f = inv_freqs(c_, r.ratio);
    const Vec qr = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wq_a")), c_.q_lora_rank, w_.vec(p + "q_norm.weight"),
                            c_.rms_norm_eps);
    Vec q = matmul(pool_, qr, T_, w_.linear(p + "wq_b"));  // [T, nh * hd], no per-head norm
    Vec kv = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wkv")), hd, w_.vec(p + "kv_norm.weight"), c_.rms_norm_eps);
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t h = 0; h < nh; ++h) rope(q.data() + (t * nh + h) * hd, hd, rd, f, t);
      rope(kv.data() + t * hd, hd, rd, f, t);
      if (opt_.qdq) qdq_pow2(kv.data() + t * hd, hd, 32, true);
    }
    const KvSource* src = nullptr;
    const std::vector<std::vector<int64_t>>* sel = nullptr;
    if (r.ratio > 0) {
      if (r.owns_compressor) sources_[L] = compress(p, a, r.ratio);
      src = &sources_.at(r.kv_source);
      if (r.owns_indexer) {
        auto score = index_scores(p, a, qr, *src, f);
        if (r.candidate_source) cand_ = candidates(score, src->G, r.ratio);
        if (r.candidate_user) {
          for (int64_t t = 0; t < T_; ++t) {
            for (int64_t g = 0; g < src->G; ++g) {
              if (!cand_[t][g]) score[t][g] = -INFINITY;
            }
          }
        }
        std::vector<std::vector<int64_t>> s(static_cast<size_t>(T_));
        for (int64_t t = 0; t < T_; ++t) s[t] = topk(score[t], c_.index_topk);
        selections_[L] = std::move(s);
      }
      sel = &selections_.at(r.index_source);
    }
    const Vec sink = w_.vec(p + "attn_sink");
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    Vec o(static_cast<size_t>(T_ * nh * hd));
    pool_.parallel_for(T_ * nh, 1, [&](int64_t b, int64_t e) {
      std::vector<const float*> keys;
      std::vector<double> lg;
      std::vector<double> acc(static_cast<size_t>(hd));
      for (int64_t task = b; task < e; ++task) {
        const int64_t t = task / nh, h = task % nh;
        keys.clear();
        for (int64_t j = std::max<int64_t>(0, t - W + 1); j <= t; ++j) keys.push_back(kv.data() + j * hd);
        if (sel) {
          for (int64_t g : (*sel)[t]) keys.push_back(src->ckv.data() + g * hd);
        }
        const float* qv = q.data() + (t * nh + h) * hd;
        lg.resize(keys.size());
        double mx = sink[h];
        for (size_t i = 0; i < keys.size(); ++i) {
          lg[i] = dot(qv, keys[i], hd) * scale;
          mx = std::max(mx, lg[i]);
        }
        double den = std::exp(sink[h] - mx);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t i = 0; i < keys.size(); ++i) {
          const double pr = std::exp(lg[i] - mx);
          den += pr;
          for (int64_t x = 0; x < hd; ++x) acc[x] += pr * keys[i][x];
        }
        float* out = o.data() + (t * nh + h) * hd;
        for (int64_t x = 0; x < hd; ++x) out[x] = static_cast<float>(acc[x] / den);
        rope(out, hd, rd, f, t, -1.0);
      }
    });
    return output_projection(p, o);
  }

  // Grouped low-rank output: group g's o_lora rows of wo_a act on its nh/G heads; then wo_b.
  Vec output_projection(const std::string& p, const Vec& o) {
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim;
    const Dense wo_a = w_.linear(p + "wo_a");
    const int64_t G = c_.o_groups, per = (nh / G) * hd, R = c_.o_lora_rank;
    Vec mid(static_cast<size_t>(T_ * G * R));
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t rr = 0; rr < R; ++rr) {
          mid[(t * G + g) * R + rr] = static_cast<float>(dot(o.data() + t * nh * hd + g * per, wo_a.row(g * R + rr), per));
        }
      }
    }
    return matmul(pool_, mid, T_, w_.linear(p + "wo_b"));
  }

  // §2.12 stage attention over the draft rows n = p * B + k (query position p+1+k): the ring entries
  // of positions max(0, p-W+1)..p and all B block positions of round p.
  Vec stage_attention(int64_t L, const Vec& a) {
    const int64_t s = L - c_.num_hidden_layers;
    const std::string p = c_.layer_prefix(L) + "attn.";
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim, W = c_.sliding_window;
    const int64_t B = block_;
    const std::vector<float> f = inv_freqs(c_, 0);
    const Vec qr = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wq_a")), c_.q_lora_rank, w_.vec(p + "q_norm.weight"),
                            c_.rms_norm_eps);
    Vec q = matmul(pool_, qr, T_, w_.linear(p + "wq_b"));
    Vec kv = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wkv")), hd, w_.vec(p + "kv_norm.weight"), c_.rms_norm_eps);
    for (int64_t n = 0; n < T_; ++n) {
      const int64_t pos = n / B + 1 + n % B;
      for (int64_t h = 0; h < nh; ++h) rope(q.data() + (n * nh + h) * hd, hd, rd, f, pos);
      rope(kv.data() + n * hd, hd, rd, f, pos);
      if (opt_.qdq) qdq_pow2(kv.data() + n * hd, hd, 32, true);
    }
    const Vec& ring = rings_[static_cast<size_t>(s)];
    const Vec sink = w_.vec(p + "attn_sink");
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    Vec o(static_cast<size_t>(T_ * nh * hd));
    pool_.parallel_for(T_ * nh, 1, [&](int64_t b, int64_t e) {
      std::vector<const float*> keys;
      std::vector<double> lg, acc(static_cast<size_t>(hd));
      for (int64_t task = b; task < e; ++task) {
        const int64_t n = task / nh, h = task % nh, round = n / B;
        keys.clear();
        for (int64_t j = std::max<int64_t>(0, round - W + 1); j <= round && j < ring_len_; ++j) {
          keys.push_back(ring.data() + j * hd);
        }
        for (int64_t k = 0; k < B; ++k) keys.push_back(kv.data() + (round * B + k) * hd);
        const float* qv = q.data() + (n * nh + h) * hd;
        lg.resize(keys.size());
        double mx = sink[h];
        for (size_t i = 0; i < keys.size(); ++i) {
          lg[i] = dot(qv, keys[i], hd) * scale;
          mx = std::max(mx, lg[i]);
        }
        double den = std::exp(sink[h] - mx);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t i = 0; i < keys.size(); ++i) {
          const double pr = std::exp(lg[i] - mx);
          den += pr;
          for (int64_t x = 0; x < hd; ++x) acc[x] += pr * keys[i][x];
        }
        float* out = o.data() + (n * nh + h) * hd;
        for (int64_t x = 0; x < hd; ++x) out[x] = static_cast<float>(acc[x] / den);
        rope(out, hd, rd, f, n / B + 1 + n % B, -1.0);
      }
    });
    return output_projection(p, o);
  }

  Vec swiglu(const Dense& w1, const Dense& w2, const Dense& w3, const float* x, double weight) const {
    const int64_t I = w1.rows;
    const double lim = c_.swiglu_limit;
    Vec h(static_cast<size_t>(I));
    for (int64_t i = 0; i < I; ++i) {
      double g = dot(x, w1.row(i), w1.cols), u = dot(x, w3.row(i), w3.cols);
      if (lim > 0) {
        u = std::clamp(u, -lim, lim);
        g = std::min(g, lim);
      }
      h[i] = static_cast<float>(weight * (g / (1.0 + std::exp(-g))) * u);
    }
    Vec y(static_cast<size_t>(w2.rows));
    for (int64_t r = 0; r < w2.rows; ++r) y[r] = static_cast<float>(dot(h.data(), w2.row(r), I));
    return y;
  }

  // §2.11 (text only: gate.bias, never bias_vl).
  Vec moe(const std::string& p, const Vec& f, int64_t k) {
    const Dense gate = w_.linear(p + "gate");
    const Vec bias = w_.vec(p + "gate.bias");
    const int64_t E = gate.rows;
    std::vector<std::vector<int64_t>> sel(static_cast<size_t>(T_));
    std::vector<std::vector<double>> wt(static_cast<size_t>(T_));
    for (int64_t t = 0; t < T_; ++t) {
      std::vector<double> sig(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        const double l = dot(f.data() + t * d_, gate.row(e), d_) / c_.gate_temp;
        sig[e] = std::sqrt(std::max(l, 0.0) + std::log1p(std::exp(-std::fabs(l))));
        biased[e] = sig[e] + bias[e];
      }
      sel[t] = topk(biased, k);
      double sum = 0;
      for (int64_t e : sel[t]) sum += sig[e];
      for (int64_t e : sel[t]) {
        double w = sig[e];
        if (c_.norm_topk_prob && k > 1) w /= sum + 1e-20;
        wt[t].push_back(w * c_.routed_scaling_factor);
      }
    }
    Vec y(static_cast<size_t>(T_ * d_), 0.0f);
    std::vector<double> acc(static_cast<size_t>(T_ * d_), 0.0);
    for (int64_t e = 0; e < E; ++e) {
      std::vector<std::pair<int64_t, double>> rows;
      for (int64_t t = 0; t < T_; ++t) {
        for (size_t s = 0; s < sel[t].size(); ++s) {
          if (sel[t][s] == e) rows.emplace_back(t, wt[t][s]);
        }
      }
      if (rows.empty()) continue;
      const std::string x = core::str_cat(p, "experts.", e, ".");
      const Dense w1 = w_.linear(x + "w1"), w2 = w_.linear(x + "w2"), w3 = w_.linear(x + "w3");
      pool_.parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t b, int64_t en) {
        for (int64_t i = b; i < en; ++i) {
          const Vec out = swiglu(w1, w2, w3, f.data() + rows[i].first * d_, rows[i].second);
          for (int64_t c = 0; c < d_; ++c) acc[rows[i].first * d_ + c] += out[c];  // one row per task: no race
        }
      });
    }
    const Dense s1 = w_.linear(p + "shared_experts.w1"), s2 = w_.linear(p + "shared_experts.w2"),
                s3 = w_.linear(p + "shared_experts.w3");
    pool_.parallel_for(T_, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const Vec out = swiglu(s1, s2, s3, f.data() + t * d_, 1.0);
        for (int64_t c = 0; c < d_; ++c) y[t * d_ + c] = static_cast<float>(acc[t * d_ + c] + out[c]);
      }
    });
    return y;
  }

  const ModelConfig& c_;
  Weights w_;
  std::vector<int32_t> ids_;
  int64_t T_;
  PrefillOptions opt_;
  core::ThreadPool& pool_;
  int64_t hc_, d_;
  Vec X_;                          // [T, hc, d]
  std::vector<int64_t> cid_;       // compressed ids
  std::unique_ptr<EngramHash> hash_;
  std::map<int64_t, KvSource> sources_;
  std::map<int64_t, std::vector<std::vector<int64_t>>> selections_;
  std::vector<std::vector<bool>> cand_;
  std::vector<Vec> taps_;   // DSpark taps [T, d] per target layer, layer order
  std::vector<Vec> rings_;  // DSpark stage rings [T, hd]
  int64_t ring_len_ = 0, block_ = 0;
};

}  // namespace

std::vector<float> prefill_logits(const Checkpoint& ck, const EngramTokenMap* token_map,
                                  const std::vector<int32_t>& ids, const PrefillOptions& options,
                                  std::vector<float>* dspark_draft0) {
  Prefill p(ck, token_map, ids, options);
  std::vector<float> logits = p.run();
  if (dspark_draft0) *dspark_draft0 = p.dspark_draft0();
  return logits;
}

}  // namespace dsinfer::model::deepseek_v41
