// The forward of DeepSeek-V4.1 (model-v41.md §2): logits of every position fed, in one pass, in chunks
// or token by token. One layer over the whole chunk at a time, driven by the config's layer roles, fp32
// activations: the products, sink attention, indexer scores and SwiGLU on the project's kernels
// (kernels::Linear prepared once per weight, every format as stored: BF16, FP4, and FP8 with its 32x32
// scale blocks, which the packed FP8 products take as a parameter), the small glue (norms, mHC, routing) in
// double. For `dsinfer logits`, the golden tests against reference/model_v41.py and the engine
// (src/engine/deepseek_v41: several sequences in one pass with Sequence::forward_batch, blocks as
// state ranges).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/state_range.h"
#include "model/deepseek_v41/token_map.h"

namespace dsinfer::model::deepseek_v41 {

struct PrefillOptions {
  bool qdq = true;                  // the three QDQ steps of §2.10 (window FP8, compressed KV FP4, index FP4)
  core::ThreadPool* pool = nullptr;  // nullptr: ThreadPool::global()
  // The plain double-accumulation loops instead of the kernels (slow): they follow the float64
  // reference to ~1e-15 before every rounding to fp32, so the QDQ rounding decisions match it
  // free-running; with the fp32 kernels a rounding-boundary flip early in the sequence spreads.
  bool double_accumulation = false;
  // --numerics fast (serving; ignored with double_accumulation): the routed experts' FP4 products on
  // activations quantized to int8 per config activation_block (32) columns, exact integer dots
  // (kernels/cpu/linear_int8.h), and the BF16 head on bf16-rounded activations where the CPU has
  // AVX-512 BF16 (linear_bf16dot.h); FP8 products stay exact (their bf16 dots take 128x128 scale blocks
  // only). Row-local, so batch and chunk invariance hold bitwise as in the exact forward.
  bool fast = false;
  // Tests only (the fidelity bound of `fast`, V4.1 having no --numerics reference): the official
  // numerics (model-v4.md §2.10) at the sites fast changes and nowhere else: FP8 QDQ per
  // activation_block columns in front of the routed experts' FP4 products, bf16 rounding of the head's
  // input; every other product exact. Sequences on their own weights only (not prepare_weights).
  bool official_at_fast_sites = false;
  // Decoder-side bounded replay (the CED split, deepinfer-system.md §2.3; 0 = off, the exact forward).
  // A forward of more than K ids (a prompt, or the chunk that ends it) runs the decoder layers
  // (decoder_first_layer() on) only on its last K positions, their window attention truncated at the
  // replay start s; for the earlier positions only the first decoder layer's attention input, its
  // compressor and index keys are computed (functions of the encoder output alone, so bitwise the
  // exact ones). Chunks of at most K ids (decode) run every layer. An approximation: after a replay
  // the sequence refuses to export or import state (nothing may cache it as exact), rollback below s
  // and the teacher-forced draft head; only the last K rows of the replayed chunk have logits.
  int64_t decoder_replay_tokens = 0;
};

// The first decoder layer of the CED split (model-v41.md §3.3): the last kv source, the only one the
// layers at and after it read. Throws, saying why, for a config without that structure (no kv
// source, or a V4 config whose compressed layers each compress for themselves).
int64_t decoder_first_layer(const ModelConfig& c);

struct SequenceState;

// What a sequence stored of every position fed, after its §2.10 QDQ (QDQ on) or as computed (off), for
// `dsinfer logits --dump-kv` and the teacher-forced golden test: by layer, the window KV [n, head_dim]
// of every layer; the compressed KV [G, head_dim] and index keys [G, index_head_dim] of every kv source.
struct StoredKv {
  std::map<int64_t, std::vector<float>> window, compressed, index_keys;
};

// What the teacher-forced DSpark draft head (Sequence::dspark_draft0) stored after its FP8 QDQ, per
// stage: the ring entry of every position, rings [T, head_dim] (row q = kvm_s(q), §2.12), and the
// block KV of every round, block_kv [(T-1)·block, head_dim] (row p·block + k: round p, block position k).
struct DsparkKv {
  std::vector<std::vector<float>> rings, block_kv;
};

// The weights prepared for the products, shareable by the sequences of one checkpoint so that each
// weight is prepared once (a server's sequences). Not thread-safe (prepared lazily): sequences that
// share them must not run at the same time.
struct PreparedWeights;
std::shared_ptr<PreparedWeights> prepare_weights(const Checkpoint& ck, const PrefillOptions& options);

// One sequence fed in chunks (§2.13): chunked prefill, token-by-token decode (chunks of 1) and
// rollback, with the state of §3.1 (window KV, the kv sources' compressed KV, index keys and
// compressor inputs, the Engram history) kept between calls. Every result is that of the one-pass
// prefill of the whole sequence (prefill semantics, also where the official reference's one-token
// decode differs, §9.1). The caches keep every position (no ring, no compact storage yet); so do the
// DSpark taps, for a teacher-forced draft head at the end (no incremental DSpark state yet).
class Sequence {
 public:
  Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options = {});
  // With weights shared with other sequences (prepared with the same options.double_accumulation).
  Sequence(const Checkpoint& ck, const EngramTokenMap* token_map, const PrefillOptions& options,
           const std::shared_ptr<PreparedWeights>& weights);
  ~Sequence();
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;

  // Feeds ids at positions length().. and returns their logits [ids.size(), vocab] row-major.
  std::vector<float> forward(const std::vector<int32_t>& ids);
  // Only the logits of the last logit_rows ids (bitwise those rows of the full result; 0: none).
  std::vector<float> forward(const std::vector<int32_t>& ids, int64_t logit_rows);
  // Several sequences fed one chunk each (ids[i] to seqs[i], the logits of its last logit_rows[i]
  // ids) in one pass through the layers: every product takes the rows of all of them, so each weight
  // is read once per call; attention, the compressed caches, the indexer's selections and the Engram
  // history stay per sequence. Result i is bitwise seqs[i]->forward(ids[i], logit_rows[i]) (the
  // kernels are batch invariant). The sequences must be distinct and share their prepared weights
  // (prepare_weights); a chunk that a decoder replay would skip rows of runs alone.
  static std::vector<std::vector<float>> forward_batch(const std::vector<Sequence*>& seqs,
                                                       const std::vector<std::vector<int32_t>>& ids,
                                                       const std::vector<int64_t>& logit_rows);
  // forward_batch with the logits of all of them appended to `logits` (item after item, each its
  // logit_rows[i] rows): the head's product is written there and nowhere else, so a caller that keeps
  // that buffer across steps (the engine adapter) allocates no per-step logits. Same bits.
  static void forward_batch_into(const std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& ids,
                                 const std::vector<int64_t>& logit_rows, std::vector<float>& logits);
  int64_t length() const;
  // Rollback: the state as if only the first len positions had been fed.
  void truncate(int64_t len);
  // DSpark draft 0 teacher-forced at every position fed so far (as prefill_logits), from the taps
  // the forwards kept; the sequence's last call. confidence: also the confidence logits [T-1, block]
  // (§2.12 c_k, fp32 raw logits, sigmoid for the probability) of every round's greedy chain: row p,
  // column k is c_k of the round after p (anchor token p+1), conditioned on o_k as dspark_round's.
  std::vector<float> dspark_draft0(std::vector<float>* confidence = nullptr);
  // After dspark_draft0: the values it stored after their FP8 QDQ (DsparkKv).
  DsparkKv dspark_stored_kv() const;
  StoredKv stored_kv() const;
  // The memory of the state kept for every position (§3.1, compact where the QDQ makes it exact), for
  // the tests and notes; not the bounded fp32 copy of each layer's recent window rows.
  int64_t state_bytes() const;
  // The start s of the latest decoder-side bounded replay (PrefillOptions::decoder_replay_tokens), -1
  // when none ran: the decoder windows of positions before s were never computed (zero in stored_kv())
  // and the state is approximate, so it is never exported as exact.
  int64_t decoder_replay_start() const;
  // PrefillOptions::decoder_replay_tokens from the next forward on (0: off), so that a caller (the engine
  // adapter) decides per chunk which one replays; a sequence made with 0 takes a K > 0 too (the config
  // must have the encoder/decoder split, decoder_first_layer).
  void set_decoder_replay_tokens(int64_t k);
  // One DSpark draft round (§2.12) after the last position fed, anchored on the token that follows it
  // (not fed): the greedy drafts o_1 .. o_count (count <= dspark block size) for the positions after
  // the anchor. o_1 is the argmax of the teacher-forced draft 0 at that position. The state is unchanged.
  // confidence: also c_0 .. c_{count-1} (§2.12, raw logits; c_k scores draft o_{k+1}, from h_k and o_k),
  // bitwise row p of dspark_draft0's.
  std::vector<int32_t> dspark_round(int32_t anchor, int64_t count, std::vector<float>* confidence = nullptr);

  // The state of positions [begin, end) (state_range.h); begin a multiple of every kv source's ratio,
  // end too unless it is length(). append_range: a range starting at length() taken as fed; the
  // sequence then continues bit for bit as the one that exported it.
  StateRange export_range(int64_t begin, int64_t end) const;
  void append_range(const StateRange& range);

 private:
  // forward_batch (dest null: per-sequence results) and forward_batch_into (dest: appended there).
  static std::vector<std::vector<float>> batch_forward(const std::vector<Sequence*>& seqs,
                                                       const std::vector<std::vector<int32_t>>& ids,
                                                       const std::vector<int64_t>& logit_rows,
                                                       std::vector<float>* dest);
  std::unique_ptr<SequenceState> state_;
};

// logits [T, vocab] row-major. token_map: required when the config has Engram layers. With
// dspark_draft0: also the DSpark draft head (§2.12) teacher-forced at every position: row p is draft 0
// of the round after p with anchor ids[p+1] (predicting token p+2), [T-1, vocab].
std::vector<float> prefill_logits(const Checkpoint& ck, const EngramTokenMap* token_map,
                                  const std::vector<int32_t>& ids, const PrefillOptions& options = {},
                                  std::vector<float>* dspark_draft0 = nullptr);

}  // namespace dsinfer::model::deepseek_v41
