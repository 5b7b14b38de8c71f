#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>
#include <utility>

namespace dsinfer::model::deepseek_v41::detail {

namespace {

// A thread's chunk buffers between the steps of its batch contexts (a context lives for one step).
struct KeptBuffers {
  Vec x, xn, attn_q, attn_o;
  layers::ExpertScratch experts;
};
thread_local KeptBuffers kept;

}  // namespace

void Prefill::borrow_buffers() {
  X_.swap(kept.x);
  Xn_.swap(kept.xn);
  attn_q_.swap(kept.attn_q);
  attn_o_.swap(kept.attn_o);
  std::swap(experts_, kept.experts);
}

// After the layers of a chunk: the buffers of a chunk of more than kKeptRows rows are given back (a
// prefill's would hold megabytes); a batch context returns the rest to its thread for the next step.
void Prefill::keep_buffers(bool borrowed) {
  if (T_ > kKeptRows) {
    Vec().swap(X_);
    Vec().swap(Xn_);
    Vec().swap(attn_q_);
    Vec().swap(attn_o_);
    experts_ = layers::ExpertScratch();
  }
  if (borrowed) borrow_buffers();
}

// Feeds ids at positions length().. (§2.13: a chunk continues the state of the earlier ones);
// returns their logits [ids.size(), vocab].
// logit_rows >= 0: only the last logit_rows rows (the products are row-wise: the same bits).
Vec Prefill::run(const std::vector<int32_t>& ids, int64_t logit_rows) {
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
std::vector<Vec> Prefill::forward_rows(const std::vector<Prefill*>& seqs,
                                       const std::vector<const std::vector<int32_t>*>& ids,
                                       const std::vector<int64_t>& logit_rows, Vec* dest) {
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
  if (!alone) borrow_buffers();
  const Vec e = w_.rows("embed.weight", all);
  X_.resize(static_cast<size_t>(T_ * hc_ * d_));  // every element written below
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
  keep_buffers(!alone);  // the head needs none of them
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

// §2.2: returns this block's FFN pre.
std::vector<double> Prefill::block(int64_t L, const std::vector<double>& pre_in) {
  const std::string p = c_.layer_prefix(L);
  const Mix ma = hc_mix(p + "hc_attn");
  const Vec a = rms_norm(collapse(pre_in), d_, w_.vec(p + "attn_norm.weight"), c_.rms_norm_eps);
  hc_post(L < c_.num_hidden_layers ? attention(L, a) : stage_attention(L, a), ma);
  const Mix mf = hc_mix(p + "hc_ffn");
  const Vec f = rms_norm(collapse(ma.pre), d_, w_.vec(p + "ffn_norm.weight"), c_.rms_norm_eps);
  hc_post(moe(p + "ffn.", f, c_.experts_per_tok_of(L)), mf);
  return mf.pre;
}

}  // namespace dsinfer::model::deepseek_v41::detail
