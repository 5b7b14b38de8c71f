// Synthetic checkpoints in exactly the official format (model-v4.md §4.2, model-v41.md §4.2): the tensor
// inventory of a config filled with random weights, FP8 E4M3 weights with 128x128 (V4) or 32x32 (V4.1)
// E8M0 block scales, FP4 experts
// packed low nibble first with 1x32 E8M0 scales, BF16 norms/embeddings, F32 mHC/sink/ape/bias, I64
// tid2eid, the V4.1 Engram tables (FP8, per-row x 32 E8M0 scales) and their engram_token_map.json
// sidecar. Every value is a function of (seed, tensor name, element index) only, so generation runs in
// parallel and the bytes do not depend on the thread count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/inventory.h"

namespace dsinfer::model {

struct MkModelOptions {
  std::string config_path;                   // copied verbatim to DIR/config.json
  uint64_t seed = 0;
  std::string out_dir;                       // created if missing; old model files in it are replaced
  std::optional<std::string> tokenizer_dir;  // else default_tokenizer_dir(the config's architecture)
  uint64_t shard_size_bytes = 0;             // 0: one model.safetensors
  core::ThreadPool* pool = nullptr;          // nullptr: ThreadPool::global()
  ProgressFn progress;                       // bytes of tensor data written / total
};

struct MkModelResult {
  std::vector<std::string> files;  // safetensors files written
  size_t tensors = 0;
  uint64_t data_bytes = 0;
  std::string tokenizer_source;    // directory the tokenizer was copied from; empty if none
};

MkModelResult make_model(const MkModelOptions& options);

// The bytes of one tensor (and, for a quantized linear weight, of its scale, into *scale_bytes).
// Exposed for tests and for tools that want a single tensor without writing a checkpoint.
void synthesize_tensor(const ModelConfig& config, const TensorSpec& spec, uint64_t seed, core::ThreadPool& pool,
                       std::vector<uint8_t>& bytes, std::vector<uint8_t>* scale_bytes);

// The directory mkmodel takes the tokenizer from when none is given:
// ${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/<v4 | v41> (the registry's tokenizer version).
std::string default_tokenizer_dir(Architecture arch = Architecture::kDeepseekV4);

// engram_token_map.json of a synthetic V4.1 checkpoint (model-v41.md §5): {"compressed_vocab_size": C,
// "token_map": [vocab_size ids]}; a function of the seed only.
std::string synthetic_engram_token_map(const ModelConfig& config, uint64_t seed);

}  // namespace dsinfer::model
