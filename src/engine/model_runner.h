// The engine's view of a model: what the scheduler, KV manager and prefix cache need, and nothing about
// how the forward is computed. The DeepSeek-V4 adapter (v4_runner.cpp) implements it over
// model/deepseek_v4; tests implement it with small synthetic models. Keeping this seam lets the engine
// be tested on schedules, preemption and cache reuse without the cost of a real forward.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace dsinfer::engine {

// The sizes and rules the engine plans with. Byte figures are what the model really allocates, so the
// engine's budget matches the process's memory.
struct ModelInfo {
  std::string identity;           // model config + weights identity; seeds the prefix-cache hashes
  std::string cache_layout;       // block size, window, ratios, KV dtypes; also in the seed
  int32_t vocab_size = 0;
  int32_t eos_token_id = -1;
  int64_t max_context = 0;        // longest sequence (prompt + output) the model accepts
  int32_t window = 0;             // sliding window W of every layer
  int32_t block_tokens = 128;     // positions per compressed-KV block (lcm of the compress ratios)
  int64_t block_bytes = 0;        // one block: compressed KV + indexer keys of every layer
  int64_t sequence_bytes = 0;     // fixed per sequence: window rings, compressor tails, drafter ring
  int64_t snapshot_bytes = 0;     // bound on one window-state snapshot at a block-aligned position
  int32_t max_draft_tokens = 0;   // longest draft verify supports (0: no drafter); also the rollback depth
  bool supports_replay = false;   // SWA bounded replay (forward with a window floor)
  bool supports_decoder_replay = false;  // ForwardItem::decoder_replay_tokens (an encoder/decoder split)
};

// Model-owned state of one sequence: window rings, compressor tails, its compressed blocks.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t length() const = 0;  // positions processed
};

// An immutable block of compressed KV (block_tokens positions, every compressed layer), shareable
// between sequences and the prefix cache.
class KvBlock {
 public:
  virtual ~KvBlock() = default;
};

// The window state of a sequence at a block-aligned position: enough to resume exactly there.
class WindowSnapshot {
 public:
  virtual ~WindowSnapshot() = default;
  virtual int64_t position() const = 0;
  // Memory it holds; at most ModelInfo::snapshot_bytes (the bound the engine makes room for).
  virtual int64_t bytes() const = 0;
};

// One sequence's share of a batched forward.
struct ForwardItem {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;  // fed at positions seq->length() .. +tokens.size()
  int32_t logit_rows = 1;           // logits for the last `logit_rows` tokens (0: none)
  // Decoder-side bounded replay (supports_decoder_replay; 0: off): with more than K tokens the decoder
  // layers run only on the last K of them, their windows truncated at the first. Approximate: the
  // sequence's blocks and state can no longer be exported, nor rolled back to or below that position.
  int32_t decoder_replay_tokens = 0;
};

// One sequence's share of a drafting pass: `last_token` is the sampled token not yet fed (at position
// seq->length()); the drafter proposes `count` tokens for the positions after it.
struct DraftItem {
  SequenceState* seq = nullptr;
  int32_t last_token = 0;
  int32_t count = 0;
};

// One engine calls a runner from one thread at a time. A runner handed to several engines at once (as
// bench-serve does) must let their calls interleave: no scratch shared between calls unless locked, and
// prepare() must not undo what another engine asked for. An exception from any call ends only the
// requests whose sequences it touched (README.md, Faults).
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelInfo& info() const = 0;

  // The threads the model computes on; the engine samples on the same ones, never beside them.
  virtual core::ThreadPool& pool() { return core::ThreadPool::global(); }

  // Called once by the engine before any other call: whether drafts will be asked for (a model may
  // skip drafter work otherwise) and whether results must not depend on the batch.
  virtual void prepare(bool speculation, bool batch_invariant) {
    (void)speculation;
    (void)batch_invariant;
  }

  virtual std::unique_ptr<SequenceState> new_sequence() = 0;

  // Runs one step over many sequences; logits are appended to `logits` row after row, in item order
  // ([sum of logit_rows, vocab_size], float32). Each sequence advances by its tokens.
  virtual void forward(std::span<const ForwardItem> items, std::vector<float>& logits) = 0;

  // Rolls a sequence back to `length` (at most max_draft_tokens + 1 positions back, after a
  // verification step): compressed entries from dropped positions and the compressor tails are undone.
  virtual void truncate(SequenceState& seq, int64_t length) = 0;

  // The completed block `index` (positions index*block_tokens ..) of a sequence, shared.
  virtual std::shared_ptr<const KvBlock> block(const SequenceState& seq, int64_t index) = 0;

  // The prefix cache already holds an identical block `index` (computed by a request that ran at the
  // same time): make the sequence use `shared` instead of its own copy, so the memory is held once.
  // Returns false if the model cannot; the engine then keeps the copy and stops publishing for it.
  virtual bool adopt_block(SequenceState& seq, int64_t index, const std::shared_ptr<const KvBlock>& shared) {
    (void)seq;
    (void)index;
    (void)shared;
    return false;
  }

  // A completed block as bytes for a store outside the process (kv_connector.h): versioned, the model's
  // own layout inside, enough for import_block() of a runner with the same ModelInfo identity and
  // cache_layout to rebuild it exactly. Empty: this model does not export blocks (nothing is saved).
  virtual std::vector<uint8_t> export_block(const KvBlock& block) {
    (void)block;
    return {};
  }

  // Rebuilds block `index` from export_block() bytes; throws on bytes it cannot use (corrupt, another
  // layout or index). Called on a store's I/O thread, beside every other call of every engine: it must
  // touch nothing shared with them (only the immutable layout). Null: this model does not import.
  virtual std::shared_ptr<const KvBlock> import_block(int64_t index, std::span<const uint8_t> bytes) {
    (void)index;
    (void)bytes;
    return nullptr;
  }

  // Disaggregation (a prefill worker hands a sequence to a decode worker): the sequence's whole state at
  // its length() as bytes (any length, block-aligned or not) from which import_sequence() of a runner
  // with the same identity and cache_layout continues it exactly: its next forward (and draft) gives
  // bitwise what this one's would. Empty: this model does not export sequences.
  virtual std::vector<uint8_t> export_sequence(const SequenceState& seq) {
    (void)seq;
    return {};
  }
  // A new sequence from export_sequence() bytes; throws on bytes it cannot use. Null: not supported.
  virtual std::unique_ptr<SequenceState> import_sequence(std::span<const uint8_t> bytes) {
    (void)bytes;
    return nullptr;
  }

  // Window state at the sequence's current length, which must be a multiple of block_tokens.
  virtual std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& seq) = 0;

  // Makes a fresh sequence start from cached blocks covering positions 0 .. h = n*block_tokens.
  // With a snapshot at h the sequence resumes exactly: length() == h afterwards.
  // Without one (SWA bounded replay, supports_replay): length() == h - min(window, h) afterwards, the
  // window floor of the sequence is that position (no query attends to window keys below it), and
  // feeding the positions up to h rebuilds window rings and compressor tails while the attached
  // compressed entries are kept, not rewritten.
  virtual void attach(SequenceState& seq, std::span<const std::shared_ptr<const KvBlock>> blocks,
                      const WindowSnapshot* snapshot) = 0;

  // Drafter (MTP): proposes `count` tokens per item greedily and returns them concatenated in item
  // order. The model feeds the drafter every committed position itself; whatever the drafter wrote
  // for draft positions is undone by the next forward/truncate.
  virtual std::vector<int32_t> draft(std::span<const DraftItem> items) {
    (void)items;
    return {};
  }
};

}  // namespace dsinfer::engine
