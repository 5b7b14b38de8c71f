#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/qdq.h"
#include "kernels/cpu/sink_attention.h"

namespace dsinfer::model::deepseek_v41::detail {

// The sink attention of one query row in double (double_accumulation).
void Prefill::attend_double(const float* q, const std::vector<const float*>& keys, const Vec& sink, float* out) const {
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
Vec Prefill::attend(const Vec& q, const Vec& sink, const std::vector<float>& f, KeysOf keys_of) {
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
Vec Prefill::attention(int64_t L, const Vec& a) {
  const LayerRoles& r = c_.layer_roles(L);
  const std::string p = c_.layer_prefix(L) + "attn.";
  const int64_t hd = c_.head_dim;
  Rows in;
  in.qr = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wq_a")), c_.q_lora_rank, w_.vec(p + "q_norm.weight"),
                   c_.rms_norm_eps);
  const Lin& wq_b = w_.linear(p + "wq_b");
  if (segs_.size() > 1) {  // [T, nh * hd], no per-head norm; a batch's into its kept buffer (given back below)
    attn_q_.resize(static_cast<size_t>(T_ * wq_b.rows));
    matmul_into(pool_, in.qr.data(), T_, wq_b.cols, wq_b, attn_q_.data(), wq_b.rows);
    in.q.swap(attn_q_);
  } else {
    in.q = matmul(pool_, in.qr, T_, wq_b);
  }
  in.kv = rms_norm(matmul(pool_, a, T_, w_.linear(p + "wkv")), hd, w_.vec(p + "kv_norm.weight"), c_.rms_norm_eps);
  if (r.ratio > 0 && r.owns_compressor && !(precompressed_ && L == decoder_)) {
    compressor_inputs(p, a, r.ratio, in.u, in.g);
  }
  if (r.ratio > 0 && r.owns_indexer) {
    in.qi = matmul(pool_, in.qr, T_, w_.linear(p + "indexer.wq_b"));
    in.wts = matmul(pool_, a, T_, w_.linear(p + "indexer.weights_proj"));
  }
  if (segs_.size() == 1) return output_projection(p, segs_[0].seq->attend_rows(L, std::move(in)));
  Vec& o = attn_o_;  // every segment's rows written below
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
  attn_q_.swap(in.q);
  return output_projection(p, o);
}

// This sequence's share of attention(): its rows (T_ of them at pos0_) of the products.
Vec Prefill::attend_rows(int64_t L, Rows in) {
  const LayerRoles& r = c_.layer_roles(L);
  const std::string p = c_.layer_prefix(L) + "attn.";
  const int64_t nh = c_.num_attention_heads, hd = c_.head_dim, rd = c_.qk_rope_head_dim, W = c_.sliding_window;
  const std::vector<float> f = inv_freqs(c_, r.ratio);
  Vec& q = in.q;
  Vec& kv = in.kv;
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t h = 0; h < nh; ++h) rope(q.data() + (t * nh + h) * hd, hd, rd, f, pos0_ + t);
    rope(kv.data() + t * hd, hd, rd, f, pos0_ + t);
  }
  KvRows& window = this->window(L);  // every position's window KV (keys of the positions after it)
  window.pad_to(pos0_);              // zeros where a decoder replay skipped positions
  window.append(kv.data(), T_);      // with its FP8 QDQ (QDQ on)
  // Decoder windows start at the latest replay start (deepinfer-system.md §2.3 truncation).
  const int64_t lo = decoder_ >= 0 && L >= decoder_ ? decoder_from_ : 0;
  const KvSource* src = nullptr;
  const std::vector<std::vector<int64_t>>* sel = nullptr;
  if (r.ratio > 0) {
    if (r.owns_compressor && !(precompressed_ && L == decoder_)) compress(source(L, r.ratio), p, in.u, in.g, r.ratio);
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
  // The selected compressed entries in fp32 (QDQ on: decoded here, into a buffer kept across calls):
  // all G once where the rows select more than there are (a prefill), else each row's selection.
  const bool decoded = sel && !src->ckv.fp32(), all = T_ * c_.index_topk >= (src ? src->G : 0);
  if (decoded) {
    Vec& e = ckv_rows_;
    e.resize(static_cast<size_t>((all ? src->G : T_ * c_.index_topk) * hd));
    if (all) src->ckv.decode(0, src->G, e.data());
    for (int64_t t = 0; t < T_ && !all; ++t) {
      for (size_t i = 0; i < (*sel)[t].size(); ++i) {
        const int64_t g = (*sel)[t][i];
        src->ckv.decode(g, g + 1, e.data() + (t * c_.index_topk + static_cast<int64_t>(i)) * hd);
      }
    }
  }
  Vec o = attend(q, w_.vec(p + "attn_sink"), f, [&](int64_t t, std::vector<const float*>& keys) {
    const int64_t pos = pos0_ + t;
    for (int64_t j = std::max<int64_t>(lo, pos - W + 1); j <= pos; ++j) keys.push_back(window.row(j));
    for (size_t i = 0; sel && i < (*sel)[t].size(); ++i) {
      const int64_t g = (*sel)[t][i];
      keys.push_back(!decoded ? src->ckv.row(g)
                     : all    ? ckv_rows_.data() + g * hd
                              : ckv_rows_.data() + (t * c_.index_topk + static_cast<int64_t>(i)) * hd);
    }
    return pos;
  });
  if (ckv_rows_.size() > static_cast<size_t>(kKeptRows * hd)) Vec().swap(ckv_rows_);  // a long prefill's: not kept
  return o;
}

// Grouped low-rank output: group g's o_lora rows of wo_a act on its nh/G heads; then wo_b.
Vec Prefill::output_projection(const std::string& p, const Vec& o) {
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
Vec Prefill::stage_attention(int64_t L, const Vec& a) {
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
    if (opt_.qdq) kernels::fp8_block_qdq(kv.data() + n * hd, hd, kKvQdqBlock);
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

}  // namespace dsinfer::model::deepseek_v41::detail
