// The DeepSeek-V4 (V4-Flash architecture) model on CPU: load a checkpoint, create sequences, run
// batched forward steps over many sequences (each with its own state, position and chunk length) and
// the MTP drafter. See README.md in this folder for the engine-facing contract.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/sequence_state.h"
#include "model/deepseek_v4/shape.h"
#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

struct ModelOptions {
  Numerics numerics;                 // exact (default) or reference; kv_qdq = false: --no-kv-qdq
  int threads = 0;                   // size of the model's own pool (0: DSINFER_THREADS or all cores)
  core::ThreadPool* pool = nullptr;  // use this pool instead of creating one (not owned)
  int64_t max_draft = 7;             // window slots kept beyond W so multi-token steps roll back cheaply
  bool prefault = false;             // read the embedding table's pages at load (steadier first-token latency)
  // Loading progress: (blocks loaded, blocks total), called after each block.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Which logit rows a sequence wants from a step.
enum class LogitRows : uint8_t { kNone, kLast, kAll };

struct SequenceInput {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;  // fed at positions state->length() ... ; at least one
  LogitRows logits = LogitRows::kLast;
  bool want_hidden = false;         // return the final hc-stream state of every token (MTP input)
  // false: the step will not be rolled back (e.g. a prefill chunk); the rows kept for its rollback are
  // freed right away (SequenceState::release_rollback).
  bool rollback = true;
};

struct MtpInput {
  SequenceState* state = nullptr;
  // Rows at MTP positions state->mtp_length() ...: row k is built from hidden[k] (a main-model final
  // stream state [hc][d], e.g. of position p = mtp_length + k) and tokens[k] (the token at p + 1).
  std::span<const float> hidden;    // [n][hc][d]
  std::span<const int32_t> tokens;  // [n]
  LogitRows logits = LogitRows::kLast;
  bool want_hidden = false;         // the MTP block's output streams (to chain drafts)
};

struct SequenceOutput {
  int64_t logit_rows = 0;
  std::vector<float> logits;  // [logit_rows][vocab]; with kLast the row of the last token
  std::vector<float> hidden;  // [n][hc][d] when asked
};

class Model {
 public:
  static std::unique_ptr<Model> load(const std::string& dir, const ModelOptions& options = {});
  ~Model();

  const ModelConfig& config() const { return shape_->config; }
  const ModelShape& shape() const { return *shape_; }
  std::shared_ptr<const BlockLayout> block_layout() const { return shape_->blocks; }
  core::ThreadPool& pool() { return *pool_; }

  std::unique_ptr<SequenceState> new_sequence() const;

  // One step for a batch of distinct sequences. Each sequence's results are bitwise the same whatever
  // else is in the batch and whatever the thread count. outputs.size() == batch.size().
  // Not reentrant: concurrent calls on one model are serialised.
  void forward(std::span<const SequenceInput> batch, std::span<SequenceOutput> outputs);

  // The MTP block (model-v4.md §2.12) for a batch; logits predict the token after tokens[k].
  void mtp_forward(std::span<const MtpInput> batch, std::span<SequenceOutput> outputs);

  // Time and parallel regions of every later forward() by stage are added to *profile (nullptr: off).
  // A diagnostic (`dsinfer bench --breakdown`); the results do not change.
  void set_stage_profile(StageProfile* profile) { profile_ = profile; }

  // Bytes of a fresh sequence's fixed state (windows and tails at steady-state capacity).
  size_t sequence_bytes() const;

 private:
  Model() = default;
  void run_layers(StepContext& ctx, float* X, bool mtp);
  void write_outputs(StepContext& ctx, const float* X, const HcWeights& head, const std::vector<float>& norm,
                     std::span<const LogitRows> rows, std::span<const bool> hidden, std::span<SequenceOutput> out);
  void prepare_rope(StepContext& ctx);

  std::unique_ptr<Checkpoint> ckpt_;
  std::shared_ptr<const ModelShape> shape_;
  ModelWeights weights_;
  std::unique_ptr<core::ThreadPool> own_pool_;
  core::ThreadPool* pool_ = nullptr;
  Workspace ws_;
  // The residual streams of a forward step, kept like the workspace: a prefill then neither allocates
  // nor zeroes them on one thread (8 MB at 512 rows of MEDIUM) before the embedding overwrites them.
  std::vector<float> residual_;
  StageProfile* profile_ = nullptr;
  std::mutex mutex_;
};

}  // namespace dsinfer::model::deepseek_v4
