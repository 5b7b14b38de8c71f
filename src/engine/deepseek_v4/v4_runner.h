// The engine over a DeepSeek-V4 checkpoint (model/deepseek_v4): sequences, batched forward, rollback,
// shared compressed blocks, snapshots, SWA bounded replay and MTP drafting mapped onto ModelRunner.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "model/deepseek_v4/model.h"

namespace dsinfer::engine {

// How a sequence's state becomes bytes and back, for ModelRunner::export_sequence / import_sequence.
// The format lives with the transport (disagg/sequence_handoff.h), which sits above the engine: whoever
// builds a disaggregated worker passes it in here (cmd_serve.cpp). Unset: the runner exports nothing.
struct V4SequenceCodec {
  // The state at its length() and the main model's final streams at length() - 1 (empty if unknown).
  std::function<std::vector<uint8_t>(const model::deepseek_v4::SequenceState&, std::span<const float> last_hidden)>
      save;
  // A new sequence of the model from save() bytes; `last_hidden` receives the streams saved with it.
  std::function<std::unique_ptr<model::deepseek_v4::SequenceState>(
      const model::deepseek_v4::Model&, std::span<const uint8_t> bytes, std::vector<float>& last_hidden)>
      load;
};

struct V4RunnerOptions {
  model::deepseek_v4::ModelOptions model;  // numerics, threads (the engine shares core::ThreadPool::global())
  V4SequenceCodec sequence_codec;
};

// Loads DIR (config.json + safetensors) for the engine. A DeepseekV41ForCausalLM checkpoint (config's
// architectures[0]) opens the V4.1 adapter instead (deepseek_v41/v41_runner.h) with the options that
// apply to it (kv_qdq, threads, pool; numerics must be exact; the sequence codec is V4's only). The identity that seeds the prefix cache is a
// hash of config.json, the safetensors headers and sizes, and the numerics.
std::shared_ptr<ModelRunner> open_model(const std::string& dir, const V4RunnerOptions& options = {});

// Identity of a checkpoint directory as open_model computes it.
std::string checkpoint_identity(const std::string& dir);

}  // namespace dsinfer::engine
