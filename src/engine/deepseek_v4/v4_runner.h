// The engine over a DeepSeek-V4 checkpoint (model/deepseek_v4): sequences, batched forward, rollback,
// shared compressed blocks, snapshots, SWA bounded replay and MTP drafting mapped onto ModelRunner.
#pragma once

#include <memory>
#include <string>

#include "engine/model_runner.h"
#include "model/deepseek_v4/model.h"

namespace dsinfer::engine {

struct V4RunnerOptions {
  model::deepseek_v4::ModelOptions model;  // numerics, threads (the engine shares core::ThreadPool::global())
};

// Loads DIR (config.json + safetensors) for the engine. The identity that seeds the prefix cache is a
// hash of config.json, the safetensors headers and sizes, and the numerics.
std::shared_ptr<ModelRunner> open_model(const std::string& dir, const V4RunnerOptions& options = {});

// Identity of a checkpoint directory as open_model computes it.
std::string checkpoint_identity(const std::string& dir);

}  // namespace dsinfer::engine
