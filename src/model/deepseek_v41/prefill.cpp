#include "model/deepseek_v41/prefill.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numbers>
#include <numeric>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/index_score.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/qdq.h"
#include "kernels/cpu/sink_attention.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/vec.h"
#include "model/deepseek_v41/engram_hash.h"
#include "model/deepseek_v41/state_range.h"
#include "model/layers/experts.h"
#include "model/layers/mhc.h"
#include "model/layers/pool.h"
#include "model/layers/router.h"
#include "model/layers/select.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using core::DType;
using Vec = std::vector<float>;

// A linear weight prepared for products: for the kernels, or (double accumulation) as its exact fp32
// values [rows, cols]; with --numerics fast a routed FP4 expert as int8 products (activations quantized
// per act_block columns) and the BF16 head as bf16 dots (where the CPU has AVX-512 BF16).
struct Lin {
  kernels::Linear fast;
  kernels::Fp4Int8Linear int8;
  int64_t act_block = 0;
  kernels::Bf16DotLinear bf16;
  // PrefillOptions::official_at_fast_sites: the input FP8-QDQ'd per qdq_block columns, or bf16-rounded.
  int64_t qdq_block = 0;
  bool bf16_input = false;
  int64_t rows = 0, cols = 0;
  Vec dense;
  const float* row(int64_t r) const { return dense.data() + r * cols; }
};

class Weights {
 public:
  Weights(const Checkpoint& ck, bool double_accumulation, bool fast, bool official_at_fast_sites = false)
      : ck_(ck),
        double_(double_accumulation),
        fast_(fast && !double_accumulation),
        official_(official_at_fast_sites && !fast_ && !double_accumulation) {}

  // A linear weight as kernels::Linear takes it, as stored: BF16, F32, FP4 (1x32 scales, as in V4) and
  // FP8 with V4.1's 32x32 scale blocks (the view carries the block; the packed FP8 products take it).
  kernels::WeightView view(const std::string& prefix) const {
    const TensorView& t = ck_.get(prefix + ".weight");
    const int64_t rows = t.shape.at(0);
    switch (t.dtype) {
      case DType::kBF16:
      case DType::kF32:
      case DType::kF8E4M3:
        return ck_.linear(prefix, rows, t.shape.at(1));
      case DType::kI8:
      case DType::kU8:
        return ck_.linear(prefix, rows, t.shape.at(1) * 2);
      default:
        core::fail("V4.1 prefill: weight '", t.name, "' has an unsupported dtype");
    }
  }

  // Prepared once per weight and kept: a sequence fed in chunks or token by token reuses them.
  const Lin& linear(const std::string& prefix) const { return prepared(prefix, 0, -1); }

  // Rows [begin, end) of a linear as a weight of its own (a group of a grouped projection), kept too.
  const Lin& linear_rows(const std::string& prefix, int64_t begin, int64_t end) const {
    return prepared(prefix, begin, end);
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

  const Lin& prepared(const std::string& prefix, int64_t begin, int64_t end) const {
    const std::string key = core::str_cat(prefix, "#", begin, ":", end);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    kernels::WeightView v = view(prefix);
    if (end >= 0) v = kernels::slice_rows(v, begin, end);
    Lin l;
    l.rows = v.rows;
    l.cols = v.cols;
    if (fast_ && end < 0 && routed_expert(prefix) && v.format == kernels::WeightFormat::kFP4) {
      l.int8 = kernels::Fp4Int8Linear(v);
      l.act_block = ck_.config().activation_block;
    } else if (fast_ && end < 0 && prefix == "head" && v.format == kernels::WeightFormat::kBF16 &&
               kernels::bf16dot_hardware()) {
      l.bf16 = kernels::Bf16DotLinear(v);
    } else if (double_) {
      l.dense.resize(static_cast<size_t>(l.rows * l.cols));
      for (int64_t r = 0; r < l.rows; ++r) {
        for (int64_t c = 0; c < l.cols; ++c) l.dense[r * l.cols + c] = kernels::weight_at(v, r, c);
      }
    } else {
      l.fast = kernels::Linear(v);
      if (official_ && end < 0 && routed_expert(prefix) && v.format == kernels::WeightFormat::kFP4) {
        l.qdq_block = ck_.config().activation_block;
      }
      l.bf16_input = official_ && end < 0 && prefix == "head";
    }
    return cache_.emplace(key, std::move(l)).first->second;
  }

  // "....ffn.experts.N.wK" (not the shared experts, which stay exact as in V4's fast mode).
  static bool routed_expert(const std::string& prefix) { return prefix.find(".experts.") != std::string::npos; }

  const Checkpoint& ck_;
  bool double_;
  bool fast_;
  bool official_;
  mutable std::map<std::string, Lin> cache_;
};

double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// y[t * ldy + r] = x[t * ldx ..] . W[r]: the kernels' fp32 products, or double accumulation.
void matmul_into(core::ThreadPool& pool, const float* x, int64_t T, int64_t ldx, const Lin& w, float* y,
                 int64_t ldy) {
  Vec rounded;
  if (w.qdq_block > 0 || w.bf16_input) {
    rounded.resize(static_cast<size_t>(T * w.cols));
    for (int64_t t = 0; t < T; ++t) {
      float* r = rounded.data() + t * w.cols;
      std::copy_n(x + t * ldx, w.cols, r);
      if (w.qdq_block > 0) kernels::fp8_block_qdq(r, w.cols, w.qdq_block);
      if (w.bf16_input) {
        for (int64_t c = 0; c < w.cols; ++c) r[c] = core::round_to_bf16(r[c]);
      }
    }
    x = rounded.data();
    ldx = w.cols;
  }
  if (!w.fast.empty()) {
    w.fast.forward(x, T, ldx, y, ldy, &pool);
    return;
  }
  if (!w.int8.empty()) {
    w.int8.forward(x, T, ldx, w.act_block, y, ldy, &pool);
    return;
  }
  if (!w.bf16.empty()) {
    w.bf16.forward(x, T, ldx, y, ldy, &pool);
    return;
  }
  pool.parallel_for(w.rows, 64, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      for (int64_t t = 0; t < T; ++t) y[t * ldy + r] = static_cast<float>(dot(x + t * ldx, w.row(r), w.cols));
    }
  });
}

// Y [T, out] = X [T, in] W^T.
Vec matmul(core::ThreadPool& pool, const Vec& x, int64_t T, const Lin& w) {
  DSINFER_CHECK(static_cast<int64_t>(x.size()) == T * w.cols, "V4.1 prefill: matmul shape mismatch");
  Vec y(static_cast<size_t>(T * w.rows));
  matmul_into(pool, x.data(), T, w.cols, w, y.data(), w.rows);
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
  Prefill(const Checkpoint& ck, const EngramTokenMap* map, const PrefillOptions& o,
          std::shared_ptr<Weights> weights = nullptr)
      : c_(ck.config()),
        weights_(weights ? std::move(weights) : std::make_shared<Weights>(ck, o.double_accumulation, o.fast, o.official_at_fast_sites)),
        w_(*weights_),
        map_(map), opt_(o), pool_(o.pool ? *o.pool : core::ThreadPool::global()),
        hc_(c_.hc_mult), d_(c_.hidden_size) {
    DSINFER_CHECK(c_.arch == Architecture::kDeepseekV41, "V4.1 prefill: the checkpoint is ", c_.architecture);
    if (c_.engram) {
      DSINFER_CHECK(map != nullptr, "V4.1 prefill: the model has Engram layers but no token map was given");
      hash_ = std::make_unique<EngramHash>(*c_.engram, map->compressed(c_.engram->pad_token_id));
    }
    DSINFER_CHECK(o.decoder_replay_tokens >= 0, "V4.1 prefill: decoder replay of ", o.decoder_replay_tokens,
                  " tokens");
    if (o.decoder_replay_tokens > 0) decoder_ = decoder_first_layer(c_);
  }

  // A batch context (forward_batch): only chunk buffers over the rows of several sequences, which
  // keep their own state; the products, norms and mixes run here, attention in each sequence.
  struct BatchOf {
    const Prefill& first;  // its weights, options and pool
  };
  explicit Prefill(BatchOf b)
      : c_(b.first.c_), weights_(b.first.weights_), w_(*weights_), map_(nullptr), opt_(b.first.opt_),
        pool_(b.first.pool_), hc_(b.first.hc_), d_(b.first.d_) {}

  bool shares_weights_with(const Prefill& o) const { return weights_ == o.weights_ && &c_ == &o.c_; }

  int64_t replay_start() const { return replayed_ ? decoder_from_ : -1; }

  // Sequence::set_decoder_replay_tokens: the engine decides per chunk.
  void set_replay_tokens(int64_t k) {
    DSINFER_CHECK(k >= 0, "V4.1 prefill: decoder replay of ", k, " tokens");
    if (k > 0 && decoder_ < 0) decoder_ = decoder_first_layer(c_);
    opt_.decoder_replay_tokens = k;
  }

  int64_t length() const { return static_cast<int64_t>(ids_.size()); }

  StoredKv stored() const {
    StoredKv out;
    out.window = windows_;
    for (const auto& [L, src] : sources_) {
      out.compressed[L] = src.ckv;
      out.index_keys[L] = src.ik;
    }
    return out;
  }

  // §3.4 rollback: the state of the first len positions (every cache here keeps its whole history).
  void truncate(int64_t len) {
    DSINFER_CHECK(len >= 0 && len <= length(), "V4.1 sequence: truncate to ", len, " of ", length(), " positions");
    // At or below the replay start the last position has no decoder state: nothing to roll back to.
    DSINFER_CHECK(!replayed_ || len == 0 || len > decoder_from_, "V4.1 sequence: rollback to ", len,
                  " does not pass the decoder replay start ", decoder_from_);
    if (len == 0) {
      replayed_ = false;
      decoder_from_ = 0;
    }
    const int64_t hd = c_.head_dim, ixd = c_.index_head_dim;
    ids_.resize(static_cast<size_t>(len));
    cid_.resize(std::min(cid_.size(), static_cast<size_t>(len)));
    for (auto& [L, w] : windows_) w.resize(static_cast<size_t>(len * hd));
    for (auto& [L, src] : sources_) {
      src.u.resize(static_cast<size_t>(len * hd));
      if (!src.g.empty()) src.g.resize(static_cast<size_t>(len * hd));
      src.G = len / src.ratio;
      src.ckv.resize(static_cast<size_t>(src.G * hd));
      src.ik.resize(static_cast<size_t>(src.G * ixd));
    }
    for (Vec& tap : taps_) tap.resize(static_cast<size_t>(len * d_));
  }

  // ---- State ranges (state_range.h): the engine adapter's blocks. Only copies of the arrays the
  // forward appends to, so exporting and re-appending them changes no bit of what follows. ----

  StateRange export_range(int64_t begin, int64_t end) const {
    DSINFER_CHECK(begin >= 0 && begin <= end && end <= length(), "V4.1 sequence: range [", begin, ", ", end,
                  ") of ", length(), " positions");
    DSINFER_CHECK(!drafted_, "V4.1 sequence: no state export after the DSpark draft head");
    DSINFER_CHECK(!replayed_, "V4.1 sequence: no state export after a decoder-side bounded replay (from position ",
                  decoder_from_, "): the decoder windows are approximate or missing");
    const int64_t hd = c_.head_dim, ixd = c_.index_head_dim;
    StateRange r;
    r.begin = begin;
    r.end = end;
    r.ids.assign(ids_.begin() + begin, ids_.begin() + end);
    if (c_.engram) r.cid.assign(cid_.begin() + begin, cid_.begin() + end);
    auto slice = [](const Vec& v, int64_t from, int64_t to, int64_t width) {
      return Vec(v.begin() + from * width, v.begin() + to * width);
    };
    if (length() == 0) {  // nothing fed yet: the arrays exist once the first forward made them
      r.windows.assign(static_cast<size_t>(c_.num_hidden_layers), Vec());
      for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
        const LayerRoles& roles = c_.layer_roles(L);
        if (roles.dspark_target) r.taps.emplace_back();
        if (roles.owns_compressor) r.sources.push_back({L, roles.ratio, {}, {}, {}, {}});
      }
      return r;
    }
    for (const auto& [L, w] : windows_) r.windows.push_back(slice(w, begin, end, hd));
    for (const auto& [L, src] : sources_) {
      // An open group (inputs only) may end the range only where the sequence ends.
      DSINFER_CHECK(begin % src.ratio == 0 && (end % src.ratio == 0 || end == length()), "V4.1 sequence: range [",
                    begin, ", ", end, ") splits a ratio-", src.ratio, " group of layer ", L);
      StateRange::Source s;
      s.layer = L;
      s.ratio = src.ratio;
      s.u = slice(src.u, begin, end, hd);
      if (!src.g.empty()) s.g = slice(src.g, begin, end, hd);
      s.ckv = slice(src.ckv, begin / src.ratio, end / src.ratio, hd);
      s.ik = slice(src.ik, begin / src.ratio, end / src.ratio, ixd);
      r.sources.push_back(std::move(s));
    }
    for (const Vec& tap : taps_) r.taps.push_back(slice(tap, begin, end, d_));
    return r;
  }

  // Appends the state of positions length() .. r.end, as if they had been fed.
  void append_range(const StateRange& r) {
    check_state_range(c_, r);
    DSINFER_CHECK(r.begin == length(), "V4.1 sequence: a range from ", r.begin, " appended at ", length());
    DSINFER_CHECK(!drafted_, "V4.1 sequence: no state import after the DSpark draft head");
    DSINFER_CHECK(!replayed_, "V4.1 sequence: no state import after a decoder-side bounded replay");
    ids_.insert(ids_.end(), r.ids.begin(), r.ids.end());
    if (c_.engram) cid_.insert(cid_.end(), r.cid.begin(), r.cid.end());
    for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
      Vec& w = windows_[L];
      w.insert(w.end(), r.windows[L].begin(), r.windows[L].end());
    }
    for (const StateRange::Source& s : r.sources) {
      KvSource& src = sources_[s.layer];
      src.ratio = s.ratio;
      src.u.insert(src.u.end(), s.u.begin(), s.u.end());
      src.g.insert(src.g.end(), s.g.begin(), s.g.end());
      src.ckv.insert(src.ckv.end(), s.ckv.begin(), s.ckv.end());
      src.ik.insert(src.ik.end(), s.ik.begin(), s.ik.end());
      src.G = r.end / s.ratio;
    }
    if (taps_.size() < r.taps.size()) taps_.resize(r.taps.size());
    for (size_t i = 0; i < r.taps.size(); ++i) taps_[i].insert(taps_[i].end(), r.taps[i].begin(), r.taps[i].end());
  }

  // ---- end of state ranges ----

  // The DSpark stage rings (§2.12) from the taps of positions q0 .. q0+nq-1: main_proj of each position's
  // concatenated taps, then per stage wkv -> kv_norm -> RoPE at the position (-> its QDQ); row t of
  // rings_[s] is position q0 + t.
  void build_rings(int64_t q0, int64_t nq) {
    const int64_t hd = c_.head_dim, rd = c_.qk_rope_head_dim;
    const int64_t nt = static_cast<int64_t>(taps_.size());
    Vec hidden(static_cast<size_t>(nq * nt * d_));
    for (int64_t t = 0; t < nq; ++t) {
      for (int64_t i = 0; i < nt; ++i) {
        std::copy_n(taps_[i].data() + (q0 + t) * d_, d_, hidden.data() + (t * nt + i) * d_);
      }
    }
    const Vec main_x = rms_norm(matmul(pool_, hidden, nq, w_.linear("mtp.0.main_proj")), d_,
                                w_.vec("mtp.0.main_norm.weight"), c_.rms_norm_eps);
    const std::vector<float> f = inv_freqs(c_, 0);
    rings_.clear();
    for (int64_t s = 0; s < c_.n_mtp_layers; ++s) {
      const std::string pre = core::str_cat("mtp.", s, ".attn.");
      Vec ring = rms_norm(matmul(pool_, main_x, nq, w_.linear(pre + "wkv")), hd, w_.vec(pre + "kv_norm.weight"),
                          c_.rms_norm_eps);
      for (int64_t t = 0; t < nq; ++t) {
        rope(ring.data() + t * hd, hd, rd, f, q0 + t);
        if (opt_.qdq) qdq_pow2(ring.data() + t * hd, hd, 32, true);
      }
      rings_.push_back(std::move(ring));
    }
  }

  // The DSpark stages over draft-block rows `block_ids` (their embeddings into every stream), through
  // every stage block; the collapsed stream [rows, d].
  Vec run_stages(const std::vector<int64_t>& block_ids) {
    const Vec e = w_.rows("embed.weight", block_ids);
    T_ = static_cast<int64_t>(block_ids.size());
    X_.assign(static_cast<size_t>(T_ * hc_ * d_), 0.0f);
    for (int64_t n = 0; n < T_; ++n) {
      for (int64_t j = 0; j < hc_; ++j) std::copy_n(e.data() + n * d_, d_, X_.data() + (n * hc_ + j) * d_);
    }
    std::vector<double> pre_in(static_cast<size_t>(T_ * hc_), 0.0);
    for (int64_t n = 0; n < T_; ++n) pre_in[n * hc_] = 1.0;
    for (int64_t s = 0; s < c_.n_mtp_layers; ++s) pre_in = block(c_.num_hidden_layers + s, pre_in);
    return collapse(pre_in);
  }

  // §2.12 one draft round after the last position p = length() - 1 with the anchor (the token at p+1,
  // not fed): the greedy Markov chain o_1 .. o_count. Rings only for the W positions the round sees;
  // every product is row-wise, so o_1 is bitwise the argmax of dspark_draft0's row p. Leaves the
  // sequence's state as it was (only chunk scratch is written).
  std::vector<int32_t> dspark_round(int32_t anchor, int64_t count, Vec* confidence = nullptr) {
    DSINFER_CHECK(c_.dspark && c_.n_mtp_layers > 0, "V4.1 prefill: the model has no DSpark stages");
    DSINFER_CHECK(!drafted_, "V4.1 DSpark: the sequence's teacher-forced draft head already ran");
    DSINFER_CHECK(length() >= 1, "V4.1 DSpark: a draft round needs a committed position");
    DSINFER_CHECK(anchor >= 0 && anchor < c_.vocab_size, "V4.1 DSpark: anchor ", anchor, " out of range");
    const int64_t B = c_.dspark->block_size, W = c_.sliding_window;
    DSINFER_CHECK(count >= 1 && count <= B, "V4.1 DSpark: ", count, " drafts asked, a round makes 1 to ", B);
    // After a decoder replay the taps before its start may be missing: the rings are truncated there too.
    const int64_t p = length() - 1, q0 = std::max<int64_t>(decoder_from_, p - W + 1), nq = p - q0 + 1;
    build_rings(q0, nq);
    ring0_ = q0;
    ring_len_ = nq;
    round0_ = p;
    block_ = B;
    std::vector<int64_t> block_ids(static_cast<size_t>(B), c_.dspark->noise_token_id);
    block_ids[0] = anchor;
    Vec h = run_stages(block_ids);
    round0_ = 0;  // dspark_draft0's rounds start at 0 with rings from position 0
    ring0_ = 0;
    h.resize(static_cast<size_t>(count * d_));  // rows 0 .. count-1 predict the drafts
    const Vec U = matmul(pool_, rms_norm(h, d_, w_.vec(last_stage() + "norm.weight"), c_.rms_norm_eps), count,
                         w_.linear("head"));
    std::vector<int32_t> drafts;
    if (confidence) confidence->clear();
    std::vector<int64_t> o = {anchor};
    for (int64_t k = 0; k < count; ++k) {
      const Vec emb = w_.rows(last_stage() + "markov_head.embed.weight", o);
      if (confidence) confidence->push_back(confidence_logits(h.data() + k * d_, emb, 1)[0]);
      o[0] = markov_argmax(U.data() + k * c_.vocab_size, emb, 1, nullptr)[0];
      drafts.push_back(static_cast<int32_t>(o[0]));
    }
    return drafts;
  }

  // The stage rings of positions 0 .. length()-1 and the block KV of every round as dspark_draft0
  // built them.
  DsparkKv dspark_stored_kv() const {
    DSINFER_CHECK(drafted_, "V4.1 DSpark: the rings of every position exist after the teacher-forced draft head only");
    return {rings_, block_kv_};
  }

  std::string last_stage() const { return core::str_cat("mtp.", c_.n_mtp_layers - 1, "."); }

  // §2.12 c_k = confidence_head.proj · [h_k ; markov_head.embed[o_k]] for `rows` rows (h rows of d, emb
  // rows of the Markov rank): the fp32 raw logits (sigmoid gives the probability).
  Vec confidence_logits(const float* h, const Vec& emb, int64_t rows) {
    const int64_t r = c_.dspark->markov_rank;
    Vec cat(static_cast<size_t>(rows * (d_ + r)));
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(h + i * d_, d_, cat.data() + i * (d_ + r));
      std::copy_n(emb.data() + i * r, r, cat.data() + i * (d_ + r) + d_);
    }
    return matmul(pool_, cat, rows, w_.linear(last_stage() + "confidence_head.proj"));
  }

  // Draft k's logits U_k + markov_head.head · emb (emb = markov_head.embed[o_k]) for `rows` rows of U
  // [rows, vocab]; their greedy argmax (exact ties: the lowest id). logits: also the sums, when given.
  std::vector<int64_t> markov_argmax(const float* U, const Vec& emb, int64_t rows, Vec* logits) {
    const int64_t V = c_.vocab_size;
    const Vec bias = matmul(pool_, emb, rows, w_.linear(last_stage() + "markov_head.head"));
    if (logits) logits->resize(static_cast<size_t>(rows * V));
    std::vector<int64_t> best(static_cast<size_t>(rows), 0);
    for (int64_t i = 0; i < rows; ++i) {
      float best_v = 0;
      for (int64_t v = 0; v < V; ++v) {
        const float x = static_cast<float>(static_cast<double>(U[i * V + v]) + bias[i * V + v]);
        if (logits) (*logits)[i * V + v] = x;
        if (v == 0 || x > best_v) {
          best[i] = v;
          best_v = x;
        }
      }
    }
    return best;
  }

  // §2.12 teacher-forced draft rounds after the main pass(es), from the taps of every position: for
  // every p < T-1 the round after p with anchor ids[p+1]; returns the logits of draft 0 [T-1, vocab]
  // (predicting token p+2). confidence: also the confidence logits [T-1, block] of each round's
  // greedy chain (row p, column k: c_k, as dspark_round's). The sequence's last call.
  Vec dspark_draft0(Vec* confidence = nullptr) {
    DSINFER_CHECK(c_.dspark && c_.n_mtp_layers > 0, "V4.1 prefill: the model has no DSpark stages");
    DSINFER_CHECK(!drafted_, "V4.1 DSpark: draft 0 was already computed (the sequence's last call)");
    DSINFER_CHECK(!replayed_, "V4.1 DSpark: no teacher-forced draft head after a decoder-side bounded replay");
    drafted_ = true;
    pos0_ = 0;
    round0_ = ring0_ = 0;  // rounds from position 0, rings from position 0 (dspark_round moves them)
    T_ = length();
    DSINFER_CHECK(T_ >= 2, "V4.1 DSpark: needs at least 2 prompt tokens");
    const int64_t P = T_ - 1, B = c_.dspark->block_size;
    build_rings(0, T_);
    // The draft blocks of all rounds as rows p * B + k (rounds are independent).
    ring_len_ = T_;
    block_ = B;
    std::vector<int64_t> block_ids(static_cast<size_t>(P * B), c_.dspark->noise_token_id);
    for (int64_t p = 0; p < P; ++p) block_ids[p * B] = ids_[p + 1];
    const Vec h = run_stages(block_ids);
    const Vec norm_w = w_.vec(last_stage() + "norm.weight");
    // Draft k of every round: the rows p * B + k. Draft 0 is conditioned on the anchor (o_0 = ids[p+1]);
    // the later ones (only for the confidence) on the greedy draft before them.
    std::vector<int64_t> o(ids_.begin() + 1, ids_.end());
    Vec logits;
    if (confidence) confidence->assign(static_cast<size_t>(P * B), 0.0f);
    for (int64_t k = 0; k < (confidence ? B : 1); ++k) {
      Vec hk(static_cast<size_t>(P * d_));
      for (int64_t p = 0; p < P; ++p) std::copy_n(h.data() + (p * B + k) * d_, d_, hk.data() + p * d_);
      const Vec U = matmul(pool_, rms_norm(hk, d_, norm_w, c_.rms_norm_eps), P, w_.linear("head"));
      const Vec emb = w_.rows(last_stage() + "markov_head.embed.weight", o);
      if (confidence) {
        const Vec c = confidence_logits(hk.data(), emb, P);
        for (int64_t p = 0; p < P; ++p) (*confidence)[p * B + k] = c[p];
      }
      o = markov_argmax(U.data(), emb, P, k == 0 ? &logits : nullptr);
    }
    return logits;
  }

  // Feeds ids at positions length().. (§2.13: a chunk continues the state of the earlier ones);
  // returns their logits [ids.size(), vocab].
  // logit_rows >= 0: only the last logit_rows rows (the products are row-wise: the same bits).
  Vec run(const std::vector<int32_t>& ids, int64_t logit_rows = -1) {
    std::vector<Vec> out = forward_rows({this}, {&ids}, {logit_rows});
    return std::move(out[0]);
  }

  // Feeds each sequence seqs[i] its chunk *ids[i] in one pass through the layers. This object's chunk
  // buffers (X_, T_) hold the rows of all of them, sequence after sequence (segs_): every product,
  // norm and mHC mix is row-wise and runs once over all rows (each weight read once per call), while
  // attention, the compressors' caches, the indexer's selections and the Engram history go per
  // sequence on its own rows. A row's result never depends on the other rows (the kernels are batch
  // invariant), so each sequence gets bitwise its own forward's logits. Alone, this is seqs[0];
  // several: a batch context (the constructor from a Prefill). A decoder replay that skips rows runs
  // alone.
  // dest: the logits of all sequences appended to *dest instead (in seqs order, the head's product
  // written straight there), the result empty: no per-step logits buffer of its own, whose fresh pages
  // (16 x vocab floats at 16 streams, above glibc's mmap threshold) would fault in again every step.
  std::vector<Vec> forward_rows(const std::vector<Prefill*>& seqs, const std::vector<const std::vector<int32_t>*>& ids,
                                const std::vector<int64_t>& logit_rows, Vec* dest = nullptr) {
    const bool alone = seqs.size() == 1 && seqs[0] == this;
    int64_t skip = 0;
    std::vector<int64_t> want(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Prefill& s = *seqs[i];
      DSINFER_CHECK(!ids[i]->empty(), "V4.1 prefill: empty chunk");
      for (int32_t id : *ids[i]) {
        DSINFER_CHECK(id >= 0 && id < c_.vocab_size, "V4.1 prefill: token id ", id, " out of range");
      }
      DSINFER_CHECK(!s.drafted_, "V4.1 sequence: no forward after the DSpark draft head");
      const int64_t K = s.opt_.decoder_replay_tokens, n_ids = static_cast<int64_t>(ids[i]->size());
      const int64_t sk = K > 0 && n_ids > K ? n_ids - K : 0;  // positions the decoder layers skip
      want[i] = logit_rows[i] < 0 ? n_ids : std::min(logit_rows[i], n_ids);
      DSINFER_CHECK(sk == 0 || want[i] <= K, "V4.1 prefill: decoder replay of ", K,
                    " tokens gives the logits of the last ", K, " positions only, ", want[i], " asked");
      DSINFER_CHECK(sk == 0 || alone, "V4.1 prefill: a chunk of ", n_ids, " ids with decoder replay of ", K,
                    " tokens runs alone, not in a batch");
      skip = sk;
    }
    segs_.clear();
    std::vector<int64_t> all;
    for (size_t i = 0; i < seqs.size(); ++i) {
      Prefill& s = *seqs[i];
      const int64_t n = static_cast<int64_t>(ids[i]->size());
      s.pos0_ = s.length();
      s.T_ = n;
      s.ids_.insert(s.ids_.end(), ids[i]->begin(), ids[i]->end());
      if (s.map_ && c_.engram) {
        for (int32_t id : *ids[i]) s.cid_.push_back(s.map_->compressed(id));
      }
      segs_.push_back({&s, static_cast<int64_t>(all.size()), n});
      all.insert(all.end(), ids[i]->begin(), ids[i]->end());
    }
    T_ = static_cast<int64_t>(all.size());
    const Vec e = w_.rows("embed.weight", all);
    X_.assign(static_cast<size_t>(T_ * hc_ * d_), 0.0f);
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t j = 0; j < hc_; ++j) std::copy_n(e.data() + t * d_, d_, X_.data() + (t * hc_ + j) * d_);
    }
    std::vector<double> pre_in(static_cast<size_t>(T_ * hc_), 0.0);
    for (int64_t t = 0; t < T_; ++t) pre_in[t * hc_] = 1.0;  // one-hot on stream 0 (§2.1)
    size_t tap = 0;
    for (int64_t L = 0; L < c_.num_hidden_layers; ++L) {
      const LayerRoles& r = c_.layer_roles(L);
      if (r.engram >= 0) engram(L, r.engram);
      if (r.dspark_target) {  // layer order (§2.1)
        const Vec m = stream_mean();
        for (const Segment& g : segs_) {
          Prefill& s = *g.seq;
          if (s.taps_.size() <= tap) s.taps_.emplace_back();
          s.taps_[tap].resize(static_cast<size_t>(s.pos0_ * d_));  // zeros where a replay skipped positions
          s.taps_[tap].insert(s.taps_[tap].end(), m.begin() + g.row0 * d_, m.begin() + (g.row0 + g.n) * d_);
        }
        ++tap;
      }
      if (skip > 0 && L == decoder_) enter_replay(pre_in, skip);
      pre_in = block(L, pre_in);
    }
    precompressed_ = false;
    Vec y = rms_norm(collapse(pre_in), d_, w_.vec("norm.weight"), c_.rms_norm_eps);
    // The logits of each sequence's last rows, in one product.
    int64_t rows = 0;
    for (size_t i = 0; i < seqs.size(); ++i) rows += want[i];
    std::vector<Vec> out(dest ? 0 : seqs.size());
    if (rows == 0) return out;
    Vec last(static_cast<size_t>(rows * d_));
    int64_t at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const Segment& g = segs_[i];
      std::copy_n(y.data() + (g.row0 + g.n - want[i]) * d_, want[i] * d_, last.data() + at * d_);
      at += want[i];
    }
    const Lin& head = w_.linear("head");
    const int64_t V = c_.vocab_size;
    if (dest) {  // matmul's own product, only into the caller's rows
      const size_t from = dest->size();
      dest->resize(from + static_cast<size_t>(rows * head.rows));
      matmul_into(pool_, last.data(), rows, d_, head, dest->data() + from, head.rows);
      return out;
    }
    const Vec logits = matmul(pool_, last, rows, head);
    at = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      out[i].assign(logits.begin() + at * V, logits.begin() + (at + want[i]) * V);
      at += want[i];
    }
    return out;
  }

 private:
  struct Mix {
    std::vector<double> pre, post, comb;  // [T, hc], [T, hc], [T, hc, hc]
  };

  // Decoder-side bounded replay at the first decoder layer D: its attention input `a` (from the
  // encoder output alone) and compressor for every row of the chunk, exactly as block() would; then
  // only the last rows go on (streams, deferred mix, the encoder's per-row selections and candidate
  // mask), from position s = pos0_ + skip, where the decoder windows start.
  void enter_replay(std::vector<double>& pre_in, int64_t skip) {
    const std::string p = c_.layer_prefix(decoder_);
    const Vec a = rms_norm(collapse(pre_in), d_, w_.vec(p + "attn_norm.weight"), c_.rms_norm_eps);
    const int64_t ratio = c_.layer_roles(decoder_).ratio;
    Vec u, g;
    compressor_inputs(p + "attn.", a, ratio, u, g);
    compress(sources_[decoder_], p + "attn.", u, g, ratio);
    precompressed_ = true;
    X_.erase(X_.begin(), X_.begin() + skip * hc_ * d_);
    pre_in.erase(pre_in.begin(), pre_in.begin() + skip * hc_);
    // Only what the encoder computed for this chunk has its rows (decoder layers' are a past chunk's).
    if (c_.candidate_source_layer_id >= 0 && c_.candidate_source_layer_id < decoder_) {
      cand_.erase(cand_.begin(), cand_.begin() + skip);
    }
    for (auto& [L, sel] : selections_) {
      if (L < decoder_) sel.erase(sel.begin(), sel.begin() + skip);
    }
    pos0_ += skip;
    T_ -= skip;
    segs_.at(0).n = T_;
    decoder_from_ = pos0_;
    replayed_ = true;
  }

  // §2.3 HCMix of the current streams (the coefficients and Sinkhorn shared with V4: model/layers/mhc.h).
  Mix hc_mix(const std::string& prefix) const {
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
  void engram_rows(const std::string& p, int64_t k, float* emb) const {
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

  // A kv source's state (§3.1). u and g keep the compressor inputs of every position (not only the
  // ratio-2 tail) so that a rollback to any length finds its tail.
  struct KvSource {
    int64_t ratio = 0;
    Vec u, g;  // [n, hd]: compressor wkv and (ratio 2) wgate rows
    Vec ckv;   // [G, hd]
    Vec ik;    // [G, index_dim]
    int64_t G = 0;
  };

  // §2.6: feeds the chunk to a kv source; appends the entries its tokens complete (entry e is made by
  // token e * ratio + ratio - 1, a ratio-2 group may start in the previous chunk).
  // The compressor's input rows of the chunk (all rows of a batch): wkv, and wgate for ratio 2.
  void compressor_inputs(const std::string& p, const Vec& a, int64_t ratio, Vec& u, Vec& g) {
    u = matmul(pool_, a, T_, w_.linear(p + "compressor.wkv"));
    if (ratio == 2) g = matmul(pool_, a, T_, w_.linear(p + "compressor.wgate"));
  }

  // u, g: this sequence's rows of compressor_inputs.
  void compress(KvSource& s, const std::string& p, const Vec& u, const Vec& g, int64_t ratio) {
    const int64_t hd = c_.head_dim, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
    s.ratio = ratio;
    s.u.insert(s.u.end(), u.begin(), u.end());
    if (ratio == 2) s.g.insert(s.g.end(), g.begin(), g.end());
    const int64_t G0 = s.G, G1 = (pos0_ + T_) / ratio, n = G1 - G0;
    if (n == 0) return;
    Vec z(static_cast<size_t>(n * hd));
    std::vector<double> scratch(ratio == 2 ? 3 * hd : 0);
    for (int64_t e = G0; e < G1; ++e) {
      float* ze = z.data() + (e - G0) * hd;
      if (ratio == 2) {
        const float* values[2] = {s.u.data() + (2 * e) * hd, s.u.data() + (2 * e + 1) * hd};
        const float* scores[2] = {s.g.data() + (2 * e) * hd, s.g.data() + (2 * e + 1) * hd};
        layers::softmax_pool(values, scores, 2, hd, layers::PoolOrder::kDivideLast, ze, scratch.data());
      } else {
        std::copy_n(s.u.data() + e * hd, hd, ze);
      }
    }
    Vec ckv = rms_norm(z, hd, w_.vec(p + "compressor.norm.weight"), c_.rms_norm_eps);
    const std::vector<float> f = inv_freqs(c_, ratio);
    Vec ik = rms_norm(matmul(pool_, ckv, n, w_.linear(p + "indexer.wk")), ixd, w_.vec(p + "indexer.k_norm.weight"),
                      c_.rms_norm_eps);
    for (int64_t i = 0; i < n; ++i) {
      rope(ik.data() + i * ixd, ixd, rd, f, (G0 + i) * ratio);
      rope(ckv.data() + i * hd, hd, rd, f, (G0 + i) * ratio);
      if (opt_.qdq) {
        qdq_pow2(ik.data() + i * ixd, ixd, 32, false);
        qdq_fp4_e4m3_scale(ckv.data() + i * hd, hd);
      }
    }
    s.ckv.insert(s.ckv.end(), ckv.begin(), ckv.end());
    s.ik.insert(s.ik.end(), ik.begin(), ik.end());
    s.G = G1;
  }

  // §2.7.2 scores [T][G] (-inf where not visible) of an index source.
  // qi [T, ixh * ixd], wts [T, ixh]: this sequence's rows of indexer.wq_b and weights_proj.
  std::vector<std::vector<double>> index_scores(Vec& qi, const Vec& wts, const KvSource& src,
                                                const std::vector<float>& f) {
    const int64_t ixh = c_.index_n_heads, ixd = c_.index_head_dim, rd = c_.qk_rope_head_dim;
    const double wscale = 1.0 / std::sqrt(static_cast<double>(ixd)) / std::sqrt(static_cast<double>(ixh));
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t h = 0; h < ixh; ++h) {
        float* q = qi.data() + (t * ixh + h) * ixd;
        rope(q, ixd, rd, f, pos0_ + t);
        if (opt_.qdq) qdq_pow2(q, ixd, 32, false);
      }
    }
    std::vector<std::vector<double>> score(static_cast<size_t>(T_), std::vector<double>(src.G, -INFINITY));
    pool_.parallel_for(T_, 4, [&](int64_t tb, int64_t te) {
      std::vector<float> w(static_cast<size_t>(ixh)), out(static_cast<size_t>(src.G));
      for (int64_t t = tb; t < te; ++t) {
        const int64_t n = std::min(src.G, (pos0_ + t + 1) / src.ratio);
        if (opt_.double_accumulation) {
          for (int64_t g = 0; g < n; ++g) {
            double s = 0;
            for (int64_t h = 0; h < ixh; ++h) {
              const double dq = dot(qi.data() + (t * ixh + h) * ixd, src.ik.data() + g * ixd, ixd);
              s += std::max(dq, 0.0) * (wts[t * ixh + h] * wscale);
            }
            score[t][g] = s;
          }
          continue;
        }
        for (int64_t h = 0; h < ixh; ++h) w[h] = static_cast<float>(wts[t * ixh + h] * wscale);
        kernels::index_scores(qi.data() + t * ixh * ixd, w.data(), ixh, ixd, src.ik.data(), n, out.data());
        std::copy_n(out.begin(), n, score[t].begin());
      }
    });
    return score;
  }

  // §2.8: candidate mask [T][G] of the candidate source.
  std::vector<std::vector<bool>> candidates(const std::vector<std::vector<double>>& score, int64_t G, int64_t ratio) {
    const int64_t B = c_.candidate_block_size, K = c_.candidate_topk_blocks;
    std::vector<std::vector<bool>> mask(static_cast<size_t>(T_), std::vector<bool>(G, false));
    for (int64_t t = 0; t < T_; ++t) {
      const int64_t n = std::min(G, (pos0_ + t + 1) / ratio);
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

  // The sink attention of one query row in double (double_accumulation).
  void attend_double(const float* q, const std::vector<const float*>& keys, const Vec& sink, float* out) const {
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> lg(keys.size()), acc(static_cast<size_t>(hd));
    for (int64_t h = 0; h < nh; ++h) {
      const float* qv = q + h * hd;
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
      for (int64_t x = 0; x < hd; ++x) out[h * hd + x] = static_cast<float>(acc[x] / den);
    }
  }

  // Sink attention (§2.9) of every row n of q [T, nh, hd], all heads attending the same keys, which
  // keys_of(n, keys) appends (returning row n's position); then the inverse RoPE of each head's output.
  template <class KeysOf>
  Vec attend(const Vec& q, const Vec& sink, const std::vector<float>& f, KeysOf keys_of) {
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim;
    Vec o(static_cast<size_t>(T_ * nh * hd));
    pool_.parallel_for(T_, 1, [&](int64_t b, int64_t e) {
      std::vector<const float*> keys;
      Vec scratch;
      for (int64_t n = b; n < e; ++n) {
        keys.clear();
        const int64_t pos = keys_of(n, keys);
        scratch.resize(static_cast<size_t>(nh) * (keys.size() + 1));
        if (opt_.double_accumulation) {
          attend_double(q.data() + n * nh * hd, keys, sink, o.data() + n * nh * hd);
        } else {
          kernels::SinkAttention a;
          a.q = q.data() + n * nh * hd;
          a.heads = nh;
          a.dim = hd;
          a.rows = keys.data();
          a.n = static_cast<int64_t>(keys.size());
          a.sink = sink.data();
          a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
          a.out = o.data() + n * nh * hd;
          a.scratch = scratch.data();
          kernels::sink_attention(a);
        }
        for (int64_t h = 0; h < nh; ++h) rope(o.data() + (n * nh + h) * hd, hd, rd, f, pos, -1.0);
      }
    });
    return o;
  }

  // The products of a layer's attention run over all rows of the chunk (of every sequence of a
  // batch); rotary, the caches, selection and the attention itself per sequence (attend_rows).
  Vec attention(int64_t L, const Vec& a) {
    const LayerRoles& r = c_.layer_roles(L);
    const std::string p = c_.layer_prefix(L) + "attn.";
    const int64_t hd = c_.head_dim;
    Rows in;
    in.qr = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wq_a")), c_.q_lora_rank, w_.vec(p + "q_norm.weight"),
                     c_.rms_norm_eps);
    in.q = matmul(pool_, in.qr, T_, w_.linear(p + "wq_b"));  // [T, nh * hd], no per-head norm
    in.kv = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wkv")), hd, w_.vec(p + "kv_norm.weight"), c_.rms_norm_eps);
    if (r.ratio > 0 && r.owns_compressor && !(precompressed_ && L == decoder_)) {
      compressor_inputs(p, a, r.ratio, in.u, in.g);
    }
    if (r.ratio > 0 && r.owns_indexer) {
      in.qi = matmul(pool_, in.qr, T_, w_.linear(p + "indexer.wq_b"));
      in.wts = matmul(pool_, a, T_, w_.linear(p + "indexer.weights_proj"));
    }
    Vec o;
    if (segs_.size() == 1) {
      o = segs_[0].seq->attend_rows(L, std::move(in));
    } else {
      o.resize(static_cast<size_t>(T_ * c_.num_attention_heads * hd));
      auto one = [&](const Segment& g) {
        const Vec og = g.seq->attend_rows(L, in.part(g.row0, g.n, T_));
        std::copy(og.begin(), og.end(), o.begin() + static_cast<int64_t>(og.size() / g.n) * g.row0);
      };
      // Decode-sized segments run side by side, one task each (their own parallel loops then run
      // inline, which changes no bit); a longer chunk has the rows to use the threads itself.
      const bool side_by_side = std::all_of(segs_.begin(), segs_.end(), [](const Segment& g) { return g.n <= 4; });
      if (side_by_side) {
        if (r.ratio > 0 && r.owns_compressor) w_.linear(p + "indexer.wk");  // prepared here: not thread-safe
        pool_.parallel_for(static_cast<int64_t>(segs_.size()), 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) one(segs_[i]);
        });
      } else {
        for (const Segment& g : segs_) one(g);
      }
    }
    return output_projection(p, o);
  }

  // The rows of an attention layer's products, [T, width] each (empty: not computed).
  struct Rows {
    Vec qr, q, kv, u, g, qi, wts;
    // Rows [row0, row0 + n) of every product of a chunk of T rows.
    Rows part(int64_t row0, int64_t n, int64_t T) const {
      auto cut = [&](const Vec& v) {
        const int64_t w = static_cast<int64_t>(v.size()) / T;
        return v.empty() ? Vec() : Vec(v.begin() + row0 * w, v.begin() + (row0 + n) * w);
      };
      return {cut(qr), cut(q), cut(kv), cut(u), cut(g), cut(qi), cut(wts)};
    }
  };

  // This sequence's share of attention(): its rows (T_ of them at pos0_) of the products.
  Vec attend_rows(int64_t L, Rows in) {
    const LayerRoles& r = c_.layer_roles(L);
    const std::string p = c_.layer_prefix(L) + "attn.";
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim, W = c_.sliding_window;
    const std::vector<float> f = inv_freqs(c_, r.ratio);
    Vec& q = in.q;
    Vec& kv = in.kv;
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t h = 0; h < nh; ++h) rope(q.data() + (t * nh + h) * hd, hd, rd, f, pos0_ + t);
      rope(kv.data() + t * hd, hd, rd, f, pos0_ + t);
      if (opt_.qdq) qdq_pow2(kv.data() + t * hd, hd, 32, true);
    }
    Vec& window = windows_[L];  // every position's window KV (keys of the positions after it)
    window.resize(static_cast<size_t>(pos0_ * hd));  // zeros where a decoder replay skipped positions
    window.insert(window.end(), kv.begin(), kv.end());
    // Decoder windows start at the latest replay start (deepinfer-system.md §2.3 truncation).
    const int64_t lo = decoder_ >= 0 && L >= decoder_ ? decoder_from_ : 0;
    const KvSource* src = nullptr;
    const std::vector<std::vector<int64_t>>* sel = nullptr;
    if (r.ratio > 0) {
      if (r.owns_compressor && !(precompressed_ && L == decoder_)) compress(sources_[L], p, in.u, in.g, r.ratio);
      src = &sources_.at(r.kv_source);
      if (r.owns_indexer) {
        auto score = index_scores(in.qi, in.wts, *src, f);
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
    return attend(q, w_.vec(p + "attn_sink"), f, [&](int64_t t, std::vector<const float*>& keys) {
      const int64_t pos = pos0_ + t;
      for (int64_t j = std::max<int64_t>(lo, pos - W + 1); j <= pos; ++j) keys.push_back(window.data() + j * hd);
      if (sel) {
        for (int64_t g : (*sel)[t]) keys.push_back(src->ckv.data() + g * hd);
      }
      return pos;
    });
  }

  // Grouped low-rank output: group g's o_lora rows of wo_a act on its nh/G heads; then wo_b.
  Vec output_projection(const std::string& p, const Vec& o) {
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim;
    const int64_t G = c_.o_groups, per = (nh / G) * hd, R = c_.o_lora_rank;
    Vec mid(static_cast<size_t>(T_ * G * R));
    for (int64_t g = 0; g < G; ++g) {
      matmul_into(pool_, o.data() + g * per, T_, nh * hd, w_.linear_rows(p + "wo_a", g * R, (g + 1) * R),
                  mid.data() + g * R, G * R);
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
      const int64_t pos = round0_ + n / B + 1 + n % B;
      for (int64_t h = 0; h < nh; ++h) rope(q.data() + (n * nh + h) * hd, hd, rd, f, pos);
      rope(kv.data() + n * hd, hd, rd, f, pos);
      if (opt_.qdq) qdq_pow2(kv.data() + n * hd, hd, 32, true);
    }
    if (drafted_) {  // the teacher-forced draft head keeps every round's block KV (dspark_stored_kv)
      block_kv_.resize(static_cast<size_t>(c_.n_mtp_layers));
      block_kv_[static_cast<size_t>(s)] = kv;
    }
    const Vec& ring = rings_[static_cast<size_t>(s)];
    const Vec o = attend(q, w_.vec(p + "attn_sink"), f, [&](int64_t n, std::vector<const float*>& keys) {
      const int64_t round = round0_ + n / B;  // rings hold positions ring0_ .. ring0_ + ring_len_ - 1
      for (int64_t j = std::max<int64_t>(ring0_, round - W + 1); j <= round && j < ring0_ + ring_len_; ++j) {
        keys.push_back(ring.data() + (j - ring0_) * hd);
      }
      for (int64_t k = 0; k < B; ++k) keys.push_back(kv.data() + ((n / B) * B + k) * hd);
      return round + 1 + n % B;  // the query position
    });
    return output_projection(p, o);
  }

  // double_accumulation: y [n, d] of an expert (or the shared one) on rows x [n, d], each row's SwiGLU
  // scaled by its weight, in double as the float64 reference.
  Vec expert_double(const std::string& x, const Vec& rows, int64_t n, const std::vector<double>& weight) {
    const Lin &w1 = w_.linear(x + "w1"), &w2 = w_.linear(x + "w2"), &w3 = w_.linear(x + "w3");
    const int64_t I = w1.rows;
    Vec y(static_cast<size_t>(n * d_));
    pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      std::vector<double> h(static_cast<size_t>(I));
      const double lim = c_.swiglu_limit;
      for (int64_t i = b; i < e; ++i) {
        const float* xi = rows.data() + i * d_;
        for (int64_t k = 0; k < I; ++k) {
          double g = dot(xi, w1.row(k), w1.cols), u = dot(xi, w3.row(k), w3.cols);
          if (lim > 0) {
            u = std::clamp(u, -lim, lim);
            g = std::min(g, lim);
          }
          h[k] = static_cast<float>(weight[i] * (g / (1.0 + std::exp(-g))) * u);
        }
        for (int64_t r = 0; r < w2.rows; ++r) {
          double acc = 0;
          for (int64_t k = 0; k < I; ++k) acc += h[k] * w2.row(r)[k];
          y[i * d_ + r] = static_cast<float>(acc);
        }
      }
    });
    return y;
  }

  // An expert's three prepared linears as the shared expert stage takes them (int8 products when the
  // routed FP4 experts run them, --numerics fast). *qdq: the input QDQ block of official_at_fast_sites.
  layers::ExpertProducts expert_products(const std::string& x, int64_t* qdq) const {
    const Lin &w1 = w_.linear(x + "w1"), &w2 = w_.linear(x + "w2"), &w3 = w_.linear(x + "w3");
    *qdq = w1.qdq_block;
    DSINFER_CHECK(w1.int8.empty() == w2.int8.empty() && w1.int8.empty() == w3.int8.empty() &&
                      w2.qdq_block == *qdq && w3.qdq_block == *qdq,
                  "V4.1 prefill: the products of '", x, "' differ in kind");
    if (!w1.int8.empty()) return {nullptr, nullptr, nullptr, &w1.int8, &w2.int8, &w3.int8};
    DSINFER_CHECK(!w1.fast.empty() && !w2.fast.empty() && !w3.fast.empty(), "V4.1 prefill: '", x,
                  "' has no fp32 products");
    return {&w1.fast, &w2.fast, &w3.fast, nullptr, nullptr, nullptr};
  }

  // §2.11 (text only: gate.bias, never bias_vl).
  Vec moe(const std::string& p, const Vec& f, int64_t k) {
    const Lin& gate = w_.linear(p + "gate");
    const Vec bias = w_.vec(p + "gate.bias");
    const int64_t E = gate.rows;
    const Vec logits = opt_.double_accumulation ? Vec() : matmul(pool_, f, T_, gate);
    std::vector<std::vector<int64_t>> sel(static_cast<size_t>(T_));
    std::vector<std::vector<double>> wt(static_cast<size_t>(T_));
    // V4.1's variant of the shared router: gate_temp, and the renormalisation only with norm_topk_prob
    // and more than one expert, over the sum + 1e-20.
    const layers::RouterSpec spec{c_.gate_temp, c_.norm_topk_prob && k > 1, 1e-20, c_.routed_scaling_factor};
    for (int64_t t = 0; t < T_; ++t) {
      std::vector<double> sig(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) sig[e] = logits.empty() ? dot(f.data() + t * d_, gate.row(e), d_) : logits[t * E + e];
      layers::router_scores(sig.data(), E, spec);
      sel[t].resize(static_cast<size_t>(k));
      const int64_t got = layers::select_experts(sig.data(), bias.data(), E, k, layers::SelectOrder::kByRank,
                                                 biased.data(), sel[t].data());
      sel[t].resize(static_cast<size_t>(got));
      wt[t].resize(sel[t].size());
      layers::route_weights(sig.data(), sel[t].data(), static_cast<int64_t>(sel[t].size()), spec, wt[t].data());
    }
    if (!opt_.double_accumulation) return moe_shared_stage(p, f, sel, wt, E);
    std::vector<double> acc(static_cast<size_t>(T_ * d_), 0.0);
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> ts;
      std::vector<double> weight;
      for (int64_t t = 0; t < T_; ++t) {
        for (size_t s = 0; s < sel[t].size(); ++s) {
          if (sel[t][s] == e) {
            ts.push_back(t);
            weight.push_back(wt[t][s]);
          }
        }
      }
      if (ts.empty()) continue;
      const int64_t n = static_cast<int64_t>(ts.size());
      Vec rows(static_cast<size_t>(n * d_));
      for (int64_t i = 0; i < n; ++i) std::copy_n(f.data() + ts[i] * d_, d_, rows.data() + i * d_);
      const Vec out = expert_double(core::str_cat(p, "experts.", e, "."), rows, n, weight);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < d_; ++c) acc[ts[i] * d_ + c] += out[i * d_ + c];
      }
    }
    const Vec shared =
        expert_double(p + "shared_experts.", f, T_, std::vector<double>(static_cast<size_t>(T_), 1.0));
    Vec y(static_cast<size_t>(T_ * d_));
    for (int64_t i = 0; i < T_ * d_; ++i) y[i] = static_cast<float>(acc[i] + shared[i]);
    return y;
  }

  // The fp32 products (exact or fast) on the expert stage shared with V4 (model/layers/experts.h): all
  // rows of an expert in one product, every active expert's and the shared expert's w1/w3 in one parallel
  // region, the routed outputs summed in fp32 in ascending expert id, then the shared one.
  Vec moe_shared_stage(const std::string& p, const Vec& f, const std::vector<std::vector<int64_t>>& sel,
                       const std::vector<std::vector<double>>& wt, int64_t E) {
    const int64_t K = sel.empty() ? 0 : static_cast<int64_t>(sel[0].size());
    // The small per-expert arrays are kept between calls. The stage's buffers are not: kept after a
    // prefill they hold megabytes in the engine thread's heap, and glibc then hands the per-step logits
    // (V4.1 allocates them afresh each step) new pages to fault in every step: +60k-100k minor faults
    // and a quarter of the 16-stream decode throughput on MEDIUM-V41 (bench-serve, measured).
    thread_local std::vector<layers::ExpertProducts> experts;
    thread_local std::vector<int32_t> chosen;
    thread_local std::vector<float> route;
    layers::ExpertScratch scratch;
    experts.assign(static_cast<size_t>(E), layers::ExpertProducts{});
    chosen.resize(static_cast<size_t>(T_ * K));
    route.resize(static_cast<size_t>(T_ * K));
    int64_t routed_qdq = -1, qdq = 0, act_block = 0, inter = 0;
    for (int64_t t = 0; t < T_; ++t) {
      DSINFER_CHECK(static_cast<int64_t>(sel[t].size()) == K, "V4.1 prefill: rows chose different expert counts");
      for (int64_t s = 0; s < K; ++s) {
        const int64_t e = sel[t][s];
        chosen[t * K + s] = static_cast<int32_t>(e);
        route[t * K + s] = static_cast<float>(wt[t][s]);  // as the SwiGLU took it
        if (experts[e].w1 != nullptr || experts[e].w1_int8 != nullptr) continue;
        const std::string x = core::str_cat(p, "experts.", e, ".");
        experts[e] = expert_products(x, &qdq);
        DSINFER_CHECK(routed_qdq < 0 || routed_qdq == qdq, "V4.1 prefill: routed experts with different QDQ");
        routed_qdq = qdq;
        const Lin& w1 = w_.linear(x + "w1");
        DSINFER_CHECK(inter == 0 || inter == w1.rows, "V4.1 prefill: routed experts of different widths");
        inter = w1.rows;
        if (experts[e].int8()) act_block = w1.act_block;
      }
    }
    int64_t shared_qdq = 0;
    const layers::ExpertProducts shared = expert_products(p + "shared_experts.", &shared_qdq);
    DSINFER_CHECK(shared_qdq == 0, "V4.1 prefill: the shared expert's inputs are never QDQ'd");
    layers::ExpertStage stage{d_, inter, shared.w1->rows(), K,
                              static_cast<float>(c_.swiglu_limit), act_block, {}};
    if (routed_qdq > 0) {
      // official_at_fast_sites: the routed experts' inputs FP8-QDQ'd per block, as matmul_into does.
      stage.rounding.act_quant = [routed_qdq](float* v, int64_t n) { kernels::fp8_block_qdq(v, n, routed_qdq); };
      stage.rounding.act_quant_shared = false;
    }
    Vec y(static_cast<size_t>(T_ * d_));
    layers::experts_forward(stage, experts, shared, f.data(), T_, chosen.data(), route.data(), y.data(), scratch,
                            &pool_);
    return y;
  }

  // One sequence's rows in the chunk buffers: rows [row0, row0 + n) are its positions seq->pos0_ ..
  struct Segment {
    Prefill* seq;
    int64_t row0, n;
  };

  const ModelConfig& c_;
  std::shared_ptr<Weights> weights_;  // this sequence's own, or shared (prepare_weights)
  Weights& w_;
  const EngramTokenMap* map_;
  std::vector<int32_t> ids_;  // every position's token
  int64_t pos0_ = 0;          // the chunk's first position
  int64_t T_ = 0;             // the chunk's length
  bool drafted_ = false;      // dspark_draft0 ran (it reuses the chunk buffers: the last call)
  PrefillOptions opt_;
  core::ThreadPool& pool_;
  int64_t hc_, d_;
  Vec X_;                          // [T, hc, d]
  std::vector<Segment> segs_;      // the sequences whose rows X_ holds (this one alone, or a batch's)
  std::vector<int64_t> cid_;       // compressed ids of every position
  std::map<int64_t, Vec> windows_;  // per layer the window KV [n, hd] of every position
  std::unique_ptr<EngramHash> hash_;
  std::map<int64_t, KvSource> sources_;
  std::map<int64_t, std::vector<std::vector<int64_t>>> selections_;
  std::vector<std::vector<bool>> cand_;
  std::vector<Vec> taps_;   // DSpark taps [n, d] of every position per target layer, layer order
  std::vector<Vec> rings_;     // DSpark stage rings [T, hd]
  std::vector<Vec> block_kv_;  // the teacher-forced draft head's block KV per stage [(T-1) B, hd]
  int64_t ring_len_ = 0, block_ = 0;
  int64_t round0_ = 0, ring0_ = 0;  // dspark_round: its round's position, the rings' first position
  int64_t decoder_ = -1;             // the first decoder layer when decoder replay is on
  int64_t decoder_from_ = 0;         // the decoder windows' first position (the latest replay start)
  bool replayed_ = false;            // a decoder replay ran: the state is approximate
  bool precompressed_ = false;       // this chunk's first decoder layer compressed in enter_replay
};

}  // namespace

int64_t decoder_first_layer(const ModelConfig& c) {
  DSINFER_CHECK(c.arch == Architecture::kDeepseekV41, "decoder-side bounded replay needs the CED encoder/decoder ",
                "structure of DeepSeek-V4.1 (a last kv source read by every layer after it); ", c.architecture,
                " has none");
  int64_t D = -1;
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    if (c.layer_roles(L).owns_compressor) D = L;
  }
  DSINFER_CHECK(D >= 0, "decoder-side bounded replay: the config has no kv source layer, so no encoder/decoder split");
  for (int64_t L = D; L < c.num_hidden_layers; ++L) {
    const LayerRoles& r = c.layer_roles(L);
    DSINFER_CHECK(r.ratio == 0 || r.kv_source == D, "decoder-side bounded replay: decoder layer ", L,
                  " reads the compressed KV of layer ", r.kv_source, ", not of the first decoder layer ", D);
  }
  return D;
}

struct SequenceState {
  Prefill p;
};

Sequence::Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options)
    : state_(std::make_unique<SequenceState>(SequenceState{Prefill(ck, token_map, options)})) {}

struct PreparedWeights {
  std::shared_ptr<Weights> weights;
  bool double_accumulation = false;
  bool fast = false;
};

std::shared_ptr<PreparedWeights> prepare_weights(const Checkpoint& ck, const PrefillOptions& options) {
  return std::make_shared<PreparedWeights>(
      PreparedWeights{std::make_shared<Weights>(ck, options.double_accumulation, options.fast),
                      options.double_accumulation, options.fast});
}

Sequence::Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options,
                   const std::shared_ptr<PreparedWeights>& weights)
    : state_(std::make_unique<SequenceState>(SequenceState{Prefill(ck, token_map, options, weights->weights)})) {
  DSINFER_CHECK(weights->double_accumulation == options.double_accumulation && weights->fast == options.fast,
                "V4.1 sequence: weights prepared for another accumulation mode or numerics");
}
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;

std::vector<float> Sequence::forward(const std::vector<int32_t>& ids) { return state_->p.run(ids); }
std::vector<float> Sequence::forward(const std::vector<int32_t>& ids, int64_t logit_rows) {
  DSINFER_CHECK(logit_rows >= 0, "V4.1 sequence: ", logit_rows, " logit rows");
  return state_->p.run(ids, logit_rows);
}
int64_t Sequence::length() const { return state_->p.length(); }
void Sequence::truncate(int64_t len) { state_->p.truncate(len); }
std::vector<float> Sequence::dspark_draft0(std::vector<float>* confidence) {
  return state_->p.dspark_draft0(confidence);
}
DsparkKv Sequence::dspark_stored_kv() const { return state_->p.dspark_stored_kv(); }
StoredKv Sequence::stored_kv() const { return state_->p.stored(); }
int64_t Sequence::decoder_replay_start() const { return state_->p.replay_start(); }
void Sequence::set_decoder_replay_tokens(int64_t k) { state_->p.set_replay_tokens(k); }
std::vector<int32_t> Sequence::dspark_round(int32_t anchor, int64_t count, std::vector<float>* confidence) {
  return state_->p.dspark_round(anchor, count, confidence);
}
std::vector<std::vector<float>> Sequence::batch_forward(const std::vector<Sequence*>& seqs,
                                                       const std::vector<std::vector<int32_t>>& ids,
                                                       const std::vector<int64_t>& logit_rows,
                                                       std::vector<float>* dest) {
  DSINFER_CHECK(!seqs.empty() && ids.size() == seqs.size() && logit_rows.size() == seqs.size(),
                "V4.1 forward_batch: ", seqs.size(), " sequences, ", ids.size(), " chunks, ", logit_rows.size(),
                " logit row counts");
  std::vector<Prefill*> ps;
  std::vector<const std::vector<int32_t>*> chunks;
  for (size_t i = 0; i < seqs.size(); ++i) {
    DSINFER_CHECK(logit_rows[i] >= 0, "V4.1 sequence: ", logit_rows[i], " logit rows");
    Prefill* p = &seqs[i]->state_->p;
    DSINFER_CHECK(std::find(ps.begin(), ps.end(), p) == ps.end(), "V4.1 forward_batch: sequence ", i,
                  " appears twice");
    // The batch's products run on the first sequence's prepared weights.
    DSINFER_CHECK(p->shares_weights_with(*(ps.empty() ? p : ps[0])), "V4.1 forward_batch: sequence ", i,
                  " does not share the first one's prepared weights (prepare_weights)");
    ps.push_back(p);
    chunks.push_back(&ids[i]);
  }
  if (ps.size() == 1) return ps[0]->forward_rows(ps, chunks, logit_rows, dest);
  Prefill batch(Prefill::BatchOf{*ps[0]});
  return batch.forward_rows(ps, chunks, logit_rows, dest);
}
std::vector<std::vector<float>> Sequence::forward_batch(const std::vector<Sequence*>& seqs,
                                                       const std::vector<std::vector<int32_t>>& ids,
                                                       const std::vector<int64_t>& logit_rows) {
  return batch_forward(seqs, ids, logit_rows, nullptr);
}
void Sequence::forward_batch_into(const std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& ids,
                                  const std::vector<int64_t>& logit_rows, std::vector<float>& logits) {
  batch_forward(seqs, ids, logit_rows, &logits);
}
StateRange Sequence::export_range(int64_t begin, int64_t end) const { return state_->p.export_range(begin, end); }
void Sequence::append_range(const StateRange& range) { state_->p.append_range(range); }

std::vector<float> prefill_logits(const Checkpoint& ck, const EngramTokenMap* token_map,
                                  const std::vector<int32_t>& ids, const PrefillOptions& options,
                                  std::vector<float>* dspark_draft0) {
  DSINFER_CHECK(!ids.empty(), "V4.1 prefill: empty prompt");
  Sequence seq(ck, token_map, options);
  std::vector<float> logits = seq.forward(ids);
  if (dspark_draft0) *dspark_draft0 = seq.dspark_draft0();
  return logits;
}

}  // namespace dsinfer::model::deepseek_v41
