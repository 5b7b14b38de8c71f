// The engine over a DeepSeek-V4.1 checkpoint (model/deepseek_v41): sequences, forward, rollback,
// blocks, snapshots and the KV store's bytes mapped onto ModelRunner.
//
// State design. deepseek_v41::Sequence keeps every position (no ring): window KV of every layer, the
// kv sources' compressor inputs, compressed KV and index keys, the Engram history ids and the DSpark
// taps. A KvBlock is a copy of all of it for the block's 128 positions (StateRange), so the state at
// n·128 is exactly the concatenation of blocks 0..n-1: attach() appends the blocks to a fresh
// sequence and the sequence continues bit for bit. Every kv-source ratio (1, 2) divides 128, so no
// compressed group straddles a block. A snapshot is then only a position (nothing beyond the blocks
// is needed). A hit without a snapshot (blocks from the KV store, a node without one) takes the
// engine's replay path, which here is exact too: the blocks are attached and the sequence rolled back
// to the window's start, and the window is recomputed bit for bit (supports_replay = true).
// adopt_block accepts a cached block that is bitwise the sequence's own (so a request whose blocks
// the cache got from elsewhere keeps publishing snapshots).
// Costs, reported honestly in ModelInfo: block_bytes is everything a block holds (window KV of every
// layer included, which V4 keeps in a ring instead), and an attached block is copied into the
// sequence, so a resumed request holds its prefix twice (the cache's block and its own copy) while
// the engine counts it once. sequence_bytes is the fixed part only (the partial block is charged as
// a block).
//
// forward() feeds all items in one pass through the layers (Sequence::forward_batch: every product
// over the rows of all items, so each weight is read once per step; attention and the caches per
// sequence): a row's result never depends on the other items, and the V4.1 forward gives the
// one-pass rows for any chunking, so results are batch-invariant always. Drafter: one DSpark round (model-v41.md §2.12) after the last
// committed position, anchored on the pending token: the greedy Markov chain gives up to block_size
// (5) drafts, so max_draft_tokens = block_size (0 for a config without DSpark stages). The taps the
// round reads are part of the state, so resumed and imported sequences draft alike.
// Decoder-side bounded replay (ForwardItem::decoder_replay_tokens, supports_decoder_replay when the
// config has the CED split): the chunk it shortens runs alone, every other item in the batched pass;
// the model then refuses to export the sequence (the engine publishes nothing of it).
#pragma once

#include <memory>
#include <string>

#include "engine/model_runner.h"
#include "model/deepseek_v41/prefill.h"

namespace dsinfer::engine {

struct V41RunnerOptions {
  bool qdq = true;                   // the three QDQ steps of model-v41.md §2.10 (--kv-qdq)
  bool fast = false;                 // --numerics fast (PrefillOptions::fast); part of the identity
  int threads = 0;                   // 0: core::ThreadPool::global() unless pool is given
  core::ThreadPool* pool = nullptr;
};

// Loads DIR (config.json + safetensors, the Engram token map when the config has Engram layers).
// The identity is checkpoint_identity(DIR) under the name deepseek_v41, plus the numerics.
std::shared_ptr<ModelRunner> open_v41_model(const std::string& dir, const V41RunnerOptions& options = {});

}  // namespace dsinfer::engine
