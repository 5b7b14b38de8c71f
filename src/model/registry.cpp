#include "model/registry.h"

#include "core/error.h"

namespace dsinfer::model {

const std::vector<ArchitectureInfo>& architectures() {
  static const std::vector<ArchitectureInfo> kTable = {
      {Architecture::kDeepseekV4, "DeepseekV4ForCausalLM", "deepseek_v4", "", "model-v4.md", 128, 128, "v4", true},
      // V4.1: config, inventory, mkmodel, inspect, `dsinfer logits` (model/deepseek_v41/prefill.*) and the
      // engine through its adapter (engine/deepseek_v41/v41_runner.h: serve, generate, bench).
      {Architecture::kDeepseekV41, "DeepseekV41ForCausalLM", "deepseek_v41", "deepseek_v41_text", "model-v41.md", 32,
       32, "v41", true},
  };
  return kTable;
}

const ArchitectureInfo* find_architecture(std::string_view name) {
  for (const auto& a : architectures()) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

const ArchitectureInfo& architecture_info(Architecture id) {
  for (const auto& a : architectures()) {
    if (a.id == id) return a;
  }
  core::fail("architecture id ", static_cast<int>(id), " has no registry entry");
}

std::string known_architecture_names() {
  std::string out;
  for (const auto& a : architectures()) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

}  // namespace dsinfer::model
