// Per-sequence decode state of DeepSeek-V4 (model-v4.md §3): for every layer a window ring of KV
// (FP8-coded, slot by position), for compressed layers the compressor tails (the per-token pooling
// inputs of the unfinished groups) and the append-only compressed KV / indexer keys kept in blocks of
// block_tokens positions, plus the MTP block's own window ring.
//
// Lengths: length() positions of the main model have been processed; the next forward feeds position
// length(). mtp_length() rows of the MTP block have been processed (row p = main state at p + token p+1).
//
// Rollback: truncate(n) accepts any n in [rollback_floor(), length()], where rollback_floor() is the
// length before the last forward call. It drops the compressed entries made by later positions and
// restores the compressor tails and windows exactly (bitwise as if the dropped positions never ran).
// MTP rows: truncate_mtp(n) accepts n >= mtp_rollback_floor(), which never passes a row whose token
// (position p + 1) could still be rolled back, nor rows of MTP calls since: several chained draft calls
// can be undone at once. truncate(n) drops the MTP rows that used a dropped token (keeps <= n − 1).
//
// Prefix caching: full blocks are immutable and shareable (blocks()). A fresh state can be started on
// cached blocks (attach_prefix) and then either resume exactly from a snapshot() taken at that length
// (restore), or run SWA bounded replay (begin_bounded_replay, deepinfer-system.md §2.3).
//
// Not thread-safe; one state belongs to one sequence and is used by one forward call at a time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/deepseek_v4/compressed_block.h"
#include "model/deepseek_v4/position_ring.h"
#include "model/deepseek_v4/shape.h"

namespace dsinfer::model::deepseek_v4 {

// Window state at one length: rings, compressor tails, the unfinished block's entries and the MTP
// ring, serialised. Enough to resume exactly at position() on top of the full blocks below it. At a
// block-aligned position the unfinished block is empty and HCA tails vanish: the cheapest place to
// take one.
class WindowSnapshot {
 public:
  WindowSnapshot() = default;
  int64_t position() const { return length_; }
  int64_t mtp_length() const { return mtp_length_; }
  size_t size_bytes() const { return data_.size(); }
  // The serialised form (self-describing, checked against the model's layout on restore).
  std::span<const uint8_t> bytes() const { return data_; }
  static WindowSnapshot from_bytes(std::span<const uint8_t> bytes);

 private:
  friend class SequenceState;
  int64_t length_ = 0;
  int64_t mtp_length_ = 0;
  std::vector<uint8_t> data_;
};

struct StateMemory {
  size_t full_blocks = 0;      // shared blocks referenced (counted in full even when shared)
  size_t pending_blocks = 0;   // blocks still being written
  size_t windows = 0;          // window rings incl. MTP
  size_t tails = 0;            // compressor tails
  size_t total() const { return full_blocks + pending_blocks + windows + tails; }
};

// The state of one layer (backbone or MTP).
struct LayerState {
  PositionRing window;      // KvCodec rows
  PositionRing tail;        // compressed layers: [u | s] per position, c·D floats each (s includes ape)
  PositionRing index_tail;  // CSA: the indexer compressor's rows
};

class SequenceState {
 public:
  explicit SequenceState(std::shared_ptr<const ModelShape> shape);

  int64_t length() const { return length_; }
  int64_t mtp_length() const { return mtp_length_; }
  int64_t window_floor() const { return window_floor_; }  // no window key below it is attended
  int64_t rollback_floor() const { return rollback_floor_; }
  int64_t mtp_rollback_floor() const { return mtp_rollback_floor_; }
  // Compressed entries exist for positions below max(length, replay end).
  int64_t compressed_end() const { return std::max(length_, replay_end_); }
  // After attach_prefix, before restore/begin_bounded_replay: no forward possible yet.
  bool needs_window_state() const { return needs_window_; }

  void truncate(int64_t new_length);      // also truncates the MTP rows to at most new_length - 1
  // Gives up rolling back the last step (rollback_floor() becomes length()) and frees the window and
  // tail rows only a rollback would need (a long prefill chunk keeps all of its rows until then).
  void release_rollback();
  void truncate_mtp(int64_t new_length);  // in [mtp_rollback_floor(), mtp_length()]

  // Full (immutable) blocks, block i covering positions [i·B, (i+1)·B).
  const std::vector<BlockRef>& blocks() const { return full_; }
  int64_t block_tokens() const { return shape_->block_tokens; }

  // On a fresh state: takes `blocks` (indices 0, 1, ...) as the compressed KV of positions
  // [0, h = blocks.size()·B). length() becomes h; a forward needs restore() or begin_bounded_replay() first.
  void attach_prefix(std::span<const BlockRef> blocks);
  // After attach_prefix: sets length() = s = h − min(W, h) and the window floor to s. Feeding positions
  // s .. h−1 rebuilds the windows and compressor tails without rewriting the attached entries. Returns s.
  int64_t begin_bounded_replay();

  WindowSnapshot snapshot() const;
  // Resumes at snapshot.position(). The state must hold the full blocks below that position (its own,
  // or attached ones of the same prefix); later blocks are dropped.
  void restore(const WindowSnapshot& snapshot);

  StateMemory memory() const;
  const ModelShape& shape() const { return *shape_; }

  // ---- for the forward pass ----
  LayerState& layer(int64_t l) { return layers_[l]; }
  const LayerState& layer(int64_t l) const { return layers_[l]; }
  // Prepares a main-model step of n tokens / an MTP step of n rows (rollback floor, ring space).
  void begin_step(int64_t n);
  void begin_mtp_step(int64_t n);
  void end_step(int64_t n);
  void end_mtp_step(int64_t n);
  int64_t replay_end() const { return replay_end_; }
  int64_t mtp_window_floor() const { return mtp_floor_; }
  // Entry g of block-layout part `part` (must exist / be writable: its block is not full yet).
  const uint8_t* entry_kv(int part, int64_t g) const;
  const uint8_t* entry_key(int part, int64_t g) const;
  uint8_t* writable_entry_kv(int part, int64_t g);
  uint8_t* writable_entry_key(int part, int64_t g);

 private:
  const CompressedBlock& block_for(int part, int64_t g, int64_t* local) const;
  CompressedBlock& writable_block_for(int part, int64_t g, int64_t* local);
  void freeze_full_blocks();
  void unfreeze_above(int64_t end);
  void reset_rings(int64_t pos);
  size_t tail_keep_from(const LayerShape& ls, int64_t len) const;

  std::shared_ptr<const ModelShape> shape_;
  int64_t length_ = 0, mtp_length_ = 0;
  int64_t window_floor_ = 0, mtp_floor_ = 0;
  int64_t replay_end_ = 0;
  int64_t rollback_floor_ = 0, mtp_rollback_floor_ = 0;
  bool needs_window_ = false;
  std::vector<BlockRef> full_;
  std::vector<std::shared_ptr<CompressedBlock>> pending_;  // blocks full_.size(), full_.size()+1, ...
  std::vector<LayerState> layers_;  // backbone layers, then the MTP block
};

}  // namespace dsinfer::model::deepseek_v4
