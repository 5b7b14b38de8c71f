// Helpers shared by the model tests: temporary directories, small configs, raw file edits.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "model/inventory.h"
#include "model/safetensors.h"

namespace dsinfer::model::testing {

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    core::set_log_level(core::LogLevel::kError);  // expected warnings (no tokenizer, ...) would drown the output
    std::string tmpl = (std::filesystem::temp_directory_path() / "dsinfer_model_test_XXXXXX").string();
    char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A small config with every feature of the architecture (SWA, CSA, HCA, hash + scored MoE, MTP), FP8
// linears and FP4 experts, vocab 512: a checkpoint of it is ~1.5 MB.
inline nlohmann::json small_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
    "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 4,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64,
    "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 8,
    "compress_ratios": [0, 4, 8, 4, 0], "compress_rope_theta": 160000, "rope_theta": 10000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 65536, "index_n_heads": 2, "index_head_dim": 64, "index_topk": 4,
    "moe_intermediate_size": 128, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2,
    "num_hash_layers": 2, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true,
    "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
    "rms_norm_eps": 1e-6, "num_nextn_predict_layers": 1, "tie_word_embeddings": false,
    "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16", "hidden_act": "silu", "expert_dtype": "fp4",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
  })");
}

// A small V4.1 config (model-v41.md) with TINY's layer roles (configs/tiny-v41.json, §6): ratios
// [0,0,2,2,2,2,1,1,1,1] + 3 DSpark stages, kv sources 2, 4, 6, 8, index sources 2, 4, 5, 6, 8, 9,
// candidate source 6, Engram on 1 and 4, DSpark targets 7, 8, 9; vocab 512 and d 128, so a checkpoint
// is a few MB. Engram: 2 n-gram sizes x 2 heads = 4 columns per layer, primes from 50: layer 1 gets
// 53, 59, 61, 67 (sum 240), layer 4 71, 73, 79, 83 (sum 306).
inline nlohmann::json small_v41_config() {
  return nlohmann::json::parse(R"({
    "architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41",
    "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "image_token_id": 500, "tie_word_embeddings": false,
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [32, 32],
                            "scale_fmt": "ue8m0", "expert_dtype": "fp4"},
    "text_config": {
      "model_type": "deepseek_v41_text", "vocab_size": 512, "hidden_size": 128, "moe_intermediate_size": 64,
      "num_hidden_layers": 10, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128,
      "qk_rope_head_dim": 64, "q_lora_rank": 64, "o_lora_rank": 32, "o_groups": 2, "hidden_act": "silu",
      "swiglu_limit": 10.0, "rms_norm_eps": 1e-20, "tie_word_embeddings": false, "max_position_embeddings": 65536,
      "rope_theta": 10000,
      "rope_scaling": {"rope_type": "yarn", "factor": 16, "beta_fast": 32, "beta_slow": 1,
                       "original_max_position_embeddings": 65536},
      "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "scoring_func": "sqrtsoftplus",
      "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5, "sliding_window": 8,
      "compress_ratios": [0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0], "compress_rope_theta": 160000,
      "kv_source_layer_ids": [2, 4, 6, 8], "index_source_layer_ids": [2, 4, 5, 6, 8, 9],
      "index_n_heads": 2, "index_head_dim": 64, "index_topk": 4,
      "candidate_source_layer_id": 6, "candidate_topk_blocks": 4, "candidate_block_size": 2,
      "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
      "engram_layer_ids": [1, 4], "engram_num_embeddings": [240, 306], "engram_max_ngram_size": 3,
      "engram_vocab_size": 50, "engram_n_heads": 2, "engram_head_dim": 32, "engram_pad_token_id": 2,
      "engram_compressed_vocab_size": 300,
      "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 300,
      "dspark_target_layer_ids": [7, 8, 9], "dspark_markov_rank": 16,
      "dspark_n_routed_experts": 2, "dspark_num_experts_per_tok": 1
    },
    "vision_config": {"model_type": "deepseek_v41_vision", "num_hidden_layers": 0}
  })");
}

inline std::string write_config(const TempDir& dir, const nlohmann::json& config, const std::string& name = "config.json") {
  const std::string path = dir.file(name);
  write_bytes(path, config.dump(2));
  return path;
}

// Runs fn and returns the core::Error message; fails the test if nothing (or something else) is thrown.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected core::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected core::Error, nothing was thrown";
  return "";
}

// Copies every tensor of a safetensors file into memory (for rewriting with edits).
inline std::vector<TensorData> load_all(const std::string& path) {
  SafetensorsFile f(path);
  std::vector<TensorData> out;
  for (const auto& t : f.tensors()) {
    out.push_back({t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  return out;
}

inline ModelConfig parse(const nlohmann::json& j) { return ModelConfig::from_json(j, "test.json"); }

// The inventory by tensor name, and one tensor's dtype and shape checked against the release's.
inline std::map<std::string, const TensorSpec*> by_name(const std::vector<TensorSpec>& specs) {
  std::map<std::string, const TensorSpec*> m;
  for (const auto& s : specs) m[s.name] = &s;
  return m;
}

inline void expect_layout(const std::map<std::string, const TensorSpec*>& m, const std::string& name,
                          core::DType dtype, std::vector<int64_t> shape) {
  auto it = m.find(name);
  ASSERT_NE(it, m.end()) << "missing " << name;
  EXPECT_EQ(dtype_name(it->second->dtype), dtype_name(dtype)) << name;
  EXPECT_EQ(shape_string(it->second->shape), shape_string(shape)) << name;
}

}  // namespace dsinfer::model::testing
