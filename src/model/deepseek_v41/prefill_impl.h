// The V4.1 forward behind Sequence (private to model/deepseek_v41): one sequence's state, or a batch
// context over the rows of several, and the steps of a forward. Declared here, defined by purpose:
//   state.cpp       construction, rollback, stored KV, state ranges (export/append)
//   forward.cpp     the forward driver: chunks of one or several sequences through the blocks, the head
//   replay.cpp      decoder-side bounded replay (the CED split)
//   mhc.cpp         the mHC glue around the shared coefficients: mixes, collapse, post
//   engram.cpp      Engram n-gram memory
//   compressor.cpp  the kv sources' compressor (entries, their norm, RoPE, QDQ, index keys)
//   indexer.cpp     index scores and the two-level candidate blocks
//   attention.cpp   sink attention of the layers and of the DSpark stages, output projection
//   moe.cpp         MoE routing and the expert stage (double loops, or the shared fp32 stage)
//   dspark.cpp      the DSpark draft head: rings, rounds, teacher-forced draft 0
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/deepseek_v41/engram_hash.h"
#include "model/deepseek_v41/kv_rows.h"
#include "model/deepseek_v41/numerics.h"
#include "model/deepseek_v41/prefill.h"
#include "model/deepseek_v41/state_range.h"
#include "model/deepseek_v41/token_map.h"
#include "model/deepseek_v41/weights.h"
#include "model/layers/experts.h"

namespace dsinfer::model::deepseek_v41::detail {

class Prefill {
 public:
  Prefill(const Checkpoint& ck, const EngramTokenMap* map, const PrefillOptions& o,
          std::shared_ptr<Weights> weights = nullptr);

  // A batch context (forward_batch): only chunk buffers over the rows of several sequences, which
  // keep their own state; the products, norms and mixes run here, attention in each sequence.
  struct BatchOf {
    const Prefill& first;  // its weights, options and pool
  };
  explicit Prefill(BatchOf b)
      : c_(b.first.c_),
        weights_(b.first.weights_),
        w_(*weights_),
        map_(nullptr),
        opt_(b.first.opt_),
        pool_(b.first.pool_),
        hc_(b.first.hc_),
        d_(b.first.d_) {}

  bool shares_weights_with(const Prefill& o) const { return weights_ == o.weights_ && &c_ == &o.c_; }

  int64_t replay_start() const { return replayed_ ? decoder_from_ : -1; }
  void set_replay_tokens(int64_t k);

  int64_t length() const { return static_cast<int64_t>(ids_.size()); }

  // state.cpp
  StoredKv stored() const;
  int64_t state_bytes() const;
  void truncate(int64_t len);
  StateRange export_range(int64_t begin, int64_t end) const;
  void append_range(const StateRange& r);

  // dspark.cpp
  std::vector<int32_t> dspark_round(int32_t anchor, int64_t count, Vec* confidence = nullptr);
  DsparkKv dspark_stored_kv() const;
  Vec dspark_draft0(Vec* confidence = nullptr);

  // forward.cpp
  Vec run(const std::vector<int32_t>& ids, int64_t logit_rows = -1);
  std::vector<Vec> forward_rows(const std::vector<Prefill*>& seqs, const std::vector<const std::vector<int32_t>*>& ids,
                                const std::vector<int64_t>& logit_rows, Vec* dest = nullptr);

 private:
  struct Mix {
    std::vector<double> pre, post, comb;  // [T, hc], [T, hc], [T, hc, hc]
  };

  // A kv source's state (§3.1). Compressor inputs only where a later chunk reads them: a ratio-2
  // group open at a chunk's start began at the even position before it, so u and g keep every even
  // position (a rollback to any odd length finds its open group's first row); a ratio-1 entry is made
  // by its own position, in its chunk, so nothing is kept.
  struct KvSource {
    int64_t ratio = 0;
    Vec u, g;    // ratio 2: compressor wkv and wgate rows of the even positions [(n + 1) / 2, hd]
    KvRows ckv;  // [G, hd], FP4 with E4M3 scales (QDQ on)
    Vec ik;      // [G, index_dim]
    int64_t G = 0;
  };
  KvSource& source(int64_t L, int64_t ratio);  // sources_[L], made on first use

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

  // One sequence's rows in the chunk buffers: rows [row0, row0 + n) are its positions seq->pos0_ ..
  struct Segment {
    Prefill* seq;
    int64_t row0, n;
  };

  // forward.cpp
  std::vector<double> block(int64_t L, const std::vector<double>& pre_in);
  // replay.cpp
  void enter_replay(std::vector<double>& pre_in, int64_t skip);
  // mhc.cpp
  Mix hc_mix(const std::string& prefix) const;
  Vec stream_mean() const;
  Vec collapse(const std::vector<double>& pre) const;
  void hc_post(const Vec& f, const Mix& m);
  // engram.cpp
  void engram(int64_t L, int64_t k);
  void engram_rows(const std::string& p, int64_t k, float* emb) const;
  // compressor.cpp
  void compressor_inputs(const std::string& p, const Vec& a, int64_t ratio, Vec& u, Vec& g);
  void compress(KvSource& s, const std::string& p, const Vec& u, const Vec& g, int64_t ratio);
  // indexer.cpp
  std::vector<std::vector<double>> index_scores(Vec& qi, const Vec& wts, const KvSource& src,
                                                const std::vector<float>& f);
  std::vector<std::vector<bool>> candidates(const std::vector<std::vector<double>>& score, int64_t G, int64_t ratio);
  // attention.cpp
  void attend_double(const float* q, const std::vector<const float*>& keys, const Vec& sink, float* out) const;
  template <class KeysOf>
  Vec attend(const Vec& q, const Vec& sink, const std::vector<float>& f, KeysOf keys_of);
  Vec attention(int64_t L, const Vec& a);
  Vec attend_rows(int64_t L, Rows in);
  Vec output_projection(const std::string& p, const Vec& o);
  Vec stage_attention(int64_t L, const Vec& a);
  // moe.cpp
  Vec expert_double(const std::string& x, const Vec& rows, int64_t n, const std::vector<double>& weight);
  layers::ExpertProducts expert_products(const std::string& x, int64_t* qdq) const;
  Vec moe(const std::string& p, const Vec& f, int64_t k);
  Vec moe_shared_stage(const std::string& p, const Vec& f, const std::vector<std::vector<int64_t>>& sel,
                       const std::vector<std::vector<double>>& wt, int64_t E);
  // dspark.cpp
  void build_rings(int64_t q0, int64_t nq);
  Vec run_stages(const std::vector<int64_t>& block_ids);
  std::string last_stage() const { return core::str_cat("mtp.", c_.n_mtp_layers - 1, "."); }
  Vec confidence_logits(const float* h, const Vec& emb, int64_t rows);
  std::vector<int64_t> markov_argmax(const float* U, const Vec& emb, int64_t rows, Vec& bias, Vec* logits);

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
  // Chunk buffers kept across forwards: a sequence's own, or a batch context's borrowed from its
  // thread for the step (forward_rows), so a decode step writes last step's pages, not fresh ones
  // (each fresh one was faulted in again every step). A chunk of more than kKeptRows rows gives them back.
  static constexpr int64_t kKeptRows = 128;
  void borrow_buffers();
  void keep_buffers(bool borrowed);
  Vec X_;                           // [T, hc, d]
  Vec Xn_;                          // hc_post's new streams, swapped with X_
  Vec attn_q_, attn_o_;             // a batch's attention queries and output [T, nh * hd] (attention())
  Vec ckv_rows_;                    // the selected compressed entries decoded (attend_rows)
  layers::ExpertScratch experts_;   // the expert stage's (moe_shared_stage)
  std::vector<Segment> segs_;       // the sequences whose rows X_ holds (this one alone, or a batch's)
  std::vector<int64_t> cid_;        // compressed ids of every position
  KvRows& window(int64_t L);         // windows_[L], made on first use
  std::map<int64_t, KvRows> windows_;  // per layer the window KV of every position
  std::unique_ptr<EngramHash> hash_;
  std::map<int64_t, KvSource> sources_;
  std::map<int64_t, std::vector<std::vector<int64_t>>> selections_;
  std::vector<std::vector<bool>> cand_;
  std::vector<Vec> taps_;      // DSpark taps [n, d] of every position per target layer, layer order
  std::vector<Vec> rings_;     // DSpark stage rings [T, hd]
  std::vector<Vec> block_kv_;  // the teacher-forced draft head's block KV per stage [(T-1) B, hd]
  int64_t ring_len_ = 0, block_ = 0;
  int64_t round0_ = 0, ring0_ = 0;  // dspark_round: its round's position, the rings' first position
  int64_t decoder_ = -1;            // the first decoder layer when decoder replay is on
  int64_t decoder_from_ = 0;        // the decoder windows' first position (the latest replay start)
  bool replayed_ = false;           // a decoder replay ran: the state is approximate
  bool precompressed_ = false;      // this chunk's first decoder layer compressed in enter_replay
};

}  // namespace dsinfer::model::deepseek_v41::detail
