// A small synthetic model with the state structure of DeepSeek-V4 (model-v4.md §3.1) for engine tests:
// a sliding window over per-position hidden vectors, immutable per-block summaries ("compressed KV")
// that later positions attend to, snapshots of the window at block boundaries, SWA bounded replay and a
// greedy drafter with perturbed weights. Its arithmetic is per sequence and in a fixed order, so it is
// exactly batch- and chunk-invariant: any difference the engine shows comes from the engine.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <vector>

#include "engine/model_runner.h"

namespace dsinfer::engine::testing {

struct ToyConfig {
  int32_t vocab = 64;
  int32_t window = 8;
  int32_t block_tokens = 16;
  int32_t max_draft = 4;
  int64_t max_context = 4096;
  int32_t eos = 1;
  float logit_scale = 4.0f;
  float window_gain = 0.6f;   // how strongly the window feeds a position (keeps replay errors bounded)
  float drafter_noise = 0.3f; // 0: the drafter is the model itself
  int64_t block_bytes = 1000, sequence_bytes = 500, snapshot_bytes = 300;
  bool replay = true;
  bool adopt = true;  // adopt_block supported
  uint64_t seed = 7;
};

class ToyModel final : public ModelRunner {
 public:
  static constexpr int kDim = 8;
  using Vec = std::array<float, kDim>;

  explicit ToyModel(const ToyConfig& config);
  ~ToyModel() override;

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence() override;
  void forward(std::span<const ForwardItem> items, std::vector<float>& logits) override;
  void truncate(SequenceState& seq, int64_t length) override;
  std::shared_ptr<const KvBlock> block(const SequenceState& seq, int64_t index) override;
  bool adopt_block(SequenceState& seq, int64_t index, const std::shared_ptr<const KvBlock>& shared) override;
  std::vector<uint8_t> export_block(const KvBlock& block) override;
  std::shared_ptr<const KvBlock> import_block(int64_t index, std::span<const uint8_t> bytes) override;
  std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& seq) override;
  void attach(SequenceState& seq, std::span<const std::shared_ptr<const KvBlock>> blocks,
              const WindowSnapshot* snapshot) override;
  std::vector<int32_t> draft(std::span<const DraftItem> items) override;

  // Called at the start of every forward on the engine's thread: a test blocks it to queue a whole
  // workload before the first step, so contention (and preemption) does not depend on thread timing.
  std::function<void()> before_forward;

  // What the engine really holds, in the engine's byte units (sequences incl. a partial block, live
  // blocks, live snapshots), and its peak.
  int64_t live_bytes() const;
  int64_t peak_bytes() const { return peak_bytes_.load(); }
  int64_t forward_calls() const { return forward_calls_; }
  // Per forward call, the logits vector as the engine passed it (data, size, capacity) and its size
  // after the call: whether the engine reuses one buffer with room for the step's rows.
  struct LogitsBuffer {
    const float* data = nullptr;
    size_t size_in = 0, capacity_in = 0, size_out = 0;
  };
  const std::vector<LogitsBuffer>& logits_buffers() const { return logits_buffers_; }
  int64_t tokens_fed() const { return tokens_fed_; }
  int64_t max_step_tokens() const { return max_step_tokens_; }
  int64_t live_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  int64_t imported_blocks() const { return imported_blocks_.load(); }

  // Row logits of one position, for tests that compute expectations independently of the engine.
  std::vector<float> reference_logits(const std::vector<int32_t>& tokens);

  struct Seq;
  struct Block;
  struct Snapshot;

 private:
  Vec step(Seq& s, int32_t token, int64_t pos, const std::vector<float>* emb_override) const;
  void logits_of(const Vec& h, float* out) const;
  void note_bytes();

  ToyConfig config_;
  ModelInfo info_;
  std::vector<float> emb_, emb_draft_, head_;
  std::vector<float> mix_window_, mix_blocks_;
  std::vector<LogitsBuffer> logits_buffers_;
  int64_t forward_calls_ = 0, tokens_fed_ = 0, max_step_tokens_ = 0;
  std::set<const Seq*> seqs_;  // the engine never calls the model from two threads at once
  std::shared_ptr<std::atomic<int64_t>> live_blocks_, live_snapshots_;
  std::atomic<int64_t> peak_bytes_{0};
  std::atomic<int64_t> imported_blocks_{0};  // import_block runs on a store's I/O thread
};

}  // namespace dsinfer::engine::testing
