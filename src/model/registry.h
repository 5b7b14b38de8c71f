// The model registry: one entry per architecture this engine knows, looked up by architectures[0] of
// config.json (or by the Architecture id). Everything that differs between architectures at the
// format level is a field here, so config parsing, the tensor inventory, mkmodel and the loaders
// dispatch through one table (docs/ARCHITECTURE.md, "Adding a model").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace dsinfer::model {

struct ArchitectureInfo {
  Architecture id;
  std::string_view name;             // architectures[0], e.g. "DeepseekV41ForCausalLM"
  std::string_view model_type;       // top-level model_type
  std::string_view text_model_type;  // text_config.model_type when the text model is nested; "" = flat config
  std::string_view spec;             // the spec file the implementation follows
  int64_t weight_block;              // FP8 weight block edge (quantization_config.weight_block_size)
  int64_t activation_block;          // FP8 activation quantization block
  std::string_view tokenizer_version;  // tokenizer::parse_deepseek_version name ("v4", "v41")
  bool has_forward;                  // the engine can serve it (a ModelRunner adapter exists)
};

const std::vector<ArchitectureInfo>& architectures();
// nullptr when unknown.
const ArchitectureInfo* find_architecture(std::string_view name);
const ArchitectureInfo& architecture_info(Architecture id);
// "DeepseekV4ForCausalLM, DeepseekV41ForCausalLM": for error messages.
std::string known_architecture_names();

}  // namespace dsinfer::model
