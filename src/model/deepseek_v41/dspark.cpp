#include "model/deepseek_v41/prefill_impl.h"

#include <algorithm>

#include "kernels/cpu/qdq.h"

namespace dsinfer::model::deepseek_v41::detail {

// The DSpark stage rings (§2.12) from the taps of positions q0 .. q0+nq-1: main_proj of each position's
// concatenated taps, then per stage wkv -> kv_norm -> RoPE at the position (-> its QDQ); row t of
// rings_[s] is position q0 + t.
void Prefill::build_rings(int64_t q0, int64_t nq) {
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
      if (opt_.qdq) kernels::fp8_block_qdq(ring.data() + t * hd, hd, kKvQdqBlock);
    }
    rings_.push_back(std::move(ring));
  }
}

// The DSpark stages over draft-block rows `block_ids` (their embeddings into every stream), through
// every stage block; the collapsed stream [rows, d].
Vec Prefill::run_stages(const std::vector<int64_t>& block_ids) {
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
std::vector<int32_t> Prefill::dspark_round(int32_t anchor, int64_t count, Vec* confidence) {
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
  // The round's head logits [count, vocab] and each draft's Markov bias [vocab] in buffers kept by the
  // thread across rounds (the engine drafts on one thread): fresh, they were up to 6 x vocab floats of
  // new pages per sequence per round. Grown to at most block x vocab, never shrunk; only the rows this
  // round writes are read.
  thread_local Vec U, bias;
  const int64_t V = c_.vocab_size;
  if (U.size() < static_cast<size_t>(count * V)) U.resize(static_cast<size_t>(count * V));
  const Vec hn = rms_norm(h, d_, w_.vec(last_stage() + "norm.weight"), c_.rms_norm_eps);
  matmul_into(pool_, hn.data(), count, d_, w_.linear("head"), U.data(), V);
  std::vector<int32_t> drafts;
  if (confidence) confidence->clear();
  std::vector<int64_t> o = {anchor};
  for (int64_t k = 0; k < count; ++k) {
    const Vec emb = w_.rows(last_stage() + "markov_head.embed.weight", o);
    if (confidence) confidence->push_back(confidence_logits(h.data() + k * d_, emb, 1)[0]);
    o[0] = markov_argmax(U.data() + k * V, emb, 1, bias, nullptr)[0];
    drafts.push_back(static_cast<int32_t>(o[0]));
  }
  return drafts;
}

// The stage rings of positions 0 .. length()-1 and the block KV of every round as dspark_draft0
// built them.
DsparkKv Prefill::dspark_stored_kv() const {
  DSINFER_CHECK(drafted_, "V4.1 DSpark: the rings of every position exist after the teacher-forced draft head only");
  return {rings_, block_kv_};
}

// §2.12 c_k = confidence_head.proj · [h_k ; markov_head.embed[o_k]] for `rows` rows (h rows of d, emb
// rows of the Markov rank): the fp32 raw logits (sigmoid gives the probability).
Vec Prefill::confidence_logits(const float* h, const Vec& emb, int64_t rows) {
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
// bias: the caller's buffer for markov_head.head · emb (grown to rows x vocab, its first rows written).
std::vector<int64_t> Prefill::markov_argmax(const float* U, const Vec& emb, int64_t rows, Vec& bias, Vec* logits) {
  const int64_t V = c_.vocab_size;
  const Lin& head = w_.linear(last_stage() + "markov_head.head");
  DSINFER_CHECK(static_cast<int64_t>(emb.size()) == rows * head.cols && head.rows == V, "V4.1 DSpark: Markov head shape");
  if (bias.size() < static_cast<size_t>(rows * V)) bias.resize(static_cast<size_t>(rows * V));
  matmul_into(pool_, emb.data(), rows, head.cols, head, bias.data(), V);
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
Vec Prefill::dspark_draft0(Vec* confidence) {
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
  Vec logits, bias;
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
    o = markov_argmax(U.data(), emb, P, bias, k == 0 ? &logits : nullptr);
  }
  return logits;
}

}  // namespace dsinfer::model::deepseek_v41::detail
