#include "server/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <xxhash.h>

#include "core/error.h"
#include "core/log.h"
#include "model/mkmodel.h"
#include "tokenizer/deepseek_v4.h"

namespace dsinfer::server {

namespace fs = std::filesystem;

std::string_view tiny_config_json() {
  // Keep equal to configs/tiny.json (tests/server/default_model_test.cpp checks it).
  static constexpr std::string_view kConfig = R"json({
  "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
  "vocab_size": 129280, "hidden_size": 256, "num_hidden_layers": 7,
  "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64,
  "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64,
  "sliding_window": 32,
  "compress_ratios": [0, 0, 4, 32, 4, 32, 4, 0],
  "compress_rope_theta": 160000, "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
  "max_position_embeddings": 65536,
  "index_n_heads": 4, "index_head_dim": 64, "index_topk": 8,
  "moe_intermediate_size": 128, "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 2,
  "num_hash_layers": 3, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true,
  "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
  "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6, "rms_norm_eps": 1e-6,
  "num_nextn_predict_layers": 1, "tie_word_embeddings": false,
  "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "hidden_act": "silu",
  "expert_dtype": "fp4",
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
}
)json";
  return kConfig;
}

std::string dsinfer_home() {
  if (const char* h = std::getenv("DSINFER_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  DSINFER_CHECK(home && *home, "neither DSINFER_HOME nor HOME is set: cannot place the model cache");
  return std::string(home) + "/.cache/dsinfer";
}

std::string default_model_dir() {
  std::string key(tiny_config_json());
  key += "|seed=" + std::to_string(kDefaultModelSeed);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits(key.data(), key.size())));
  return dsinfer_home() + "/models/tiny-v4-" + std::string(hex, 8);
}

namespace {

void write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  DSINFER_CHECK(out.good(), "cannot write ", path.string());
}

bool complete_model(const fs::path& dir) {
  return fs::is_regular_file(dir / "config.json") && fs::is_regular_file(dir / "tokenizer.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

}  // namespace

std::string ensure_deepseek_tokenizer_dir(std::string_view version_name) {
  const auto version = tokenizer::parse_deepseek_version(version_name);
  DSINFER_CHECK(version.has_value(), "no built DeepSeek tokenizer for version '", version_name, "'");
  const std::string label = *version == tokenizer::DeepseekVersion::kV4 ? "V4" : "V4.1";
  const std::string dir = tokenizer::deepseek_tokenizer_dir(*version);
  if (fs::is_regular_file(fs::path(dir) / "tokenizer.json")) return dir;
  const fs::path base = tokenizer::kNpmV3BasePath;
  DSINFER_CHECK(fs::is_regular_file(base), "the ", label, " tokenizer is missing (", dir,
                "/tokenizer.json): run scripts/tokenizers.sh from the repository, or scripts/setup.sh first so "
                "that the npm DeepSeek-V3 base (",
                base.string(), ") exists");
  DSINFER_LOG_INFO("building the ", label, " tokenizer from ", base.string(), " into ", dir);
  std::ifstream in(base, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string json = tokenizer::build_deepseek_tokenizer_json(text.str(), *version, base.string());
  fs::create_directories(dir);
  const fs::path tmp = fs::path(dir) / (".tokenizer.json.tmp" + std::to_string(getpid()));
  write_file(tmp, json);
  write_file(fs::path(dir) / "tokenizer_config.json", tokenizer::build_deepseek_tokenizer_config(*version));
  fs::rename(tmp, fs::path(dir) / "tokenizer.json");
  return dir;
}

std::string ensure_v4_tokenizer_dir() { return ensure_deepseek_tokenizer_dir("v4"); }

DefaultModel ensure_default_model(const model::ProgressFn& progress) {
  const fs::path dir = default_model_dir();
  if (complete_model(dir)) return {dir.string(), false};
  const std::string tok_dir = ensure_v4_tokenizer_dir();
  fs::create_directories(dir.parent_path());
  const fs::path tmp = dir.parent_path() / (dir.filename().string() + ".tmp" + std::to_string(getpid()));
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  const fs::path config = tmp / "config.source.json";
  write_file(config, tiny_config_json());
  model::MkModelOptions opt;
  opt.config_path = config.string();
  opt.seed = kDefaultModelSeed;
  opt.out_dir = tmp.string();
  opt.tokenizer_dir = tok_dir;
  opt.progress = progress;
  model::make_model(opt);
  fs::remove(config);
  DSINFER_CHECK(complete_model(tmp), "mkmodel did not produce a complete model in ", tmp.string());
  fs::rename(tmp, dir, ec);
  if (ec) {  // another process got there first
    fs::remove_all(tmp);
    DSINFER_CHECK(complete_model(dir), "cannot move the generated model to ", dir.string(), ": ", ec.message());
    return {dir.string(), false};
  }
  return {dir.string(), true};
}

}  // namespace dsinfer::server
