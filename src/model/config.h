// The DeepSeek-V4 model configuration (model-v4.md §1), parsed from a Hugging Face config.json or the
// reference's inference/config.json (its names, §1.2, are accepted as aliases), and validated against
// the hard constraints of §6.1. Field names follow the HF config; the reference name is in the comment.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsinfer::model {

// How the checkpoint stores a family of linear weights.
enum class WeightStorage : uint8_t {
  kBF16,  // BF16 [out, in], no scale
  kFP8,   // F8_E4M3 [out, in] + F8_E8M0 (or F32) scale [ceil(out/128), ceil(in/128)]
  kFP4,   // I8 [out, in/2] (two E2M1 per byte, low nibble first) + F8_E8M0 (or F32) scale [out, in/32]
};
const char* weight_storage_name(WeightStorage s);

struct YarnScaling {
  std::string type = "yarn";
  double factor = 1.0;                              // rope_factor
  int64_t original_max_position_embeddings = 0;     // original_seq_len
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// V4-Flash-0731 DSpark drafter (§1.3, §7.2); present when dspark_block_size is.
struct DSparkConfig {
  int64_t block_size = 0;          // γ
  int64_t noise_token_id = 0;
  std::vector<int64_t> target_layer_ids;
  int64_t markov_rank = 0;
};

struct ModelConfig {
  std::string architecture;  // "DeepseekV4ForCausalLM"
  std::string model_type;    // "deepseek_v4"

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;           // dim
  int64_t num_hidden_layers = 0;     // n_layers (backbone blocks; MTP/DSpark stages not counted)
  int64_t num_attention_heads = 0;   // n_heads
  int64_t num_key_value_heads = 1;   // always 1 (one shared K = V vector)
  int64_t head_dim = 0;
  int64_t qk_rope_head_dim = 0;      // rope_head_dim (the LAST dims of each head)
  int64_t q_lora_rank = 0;
  int64_t o_groups = 0;
  int64_t o_lora_rank = 0;
  int64_t sliding_window = 0;        // window_size
  std::vector<int64_t> compress_ratios;  // one per layer incl. MTP/DSpark stages; 0 SWA, 4 CSA, other HCA
  double compress_rope_theta = 0;
  double rope_theta = 0;
  std::optional<YarnScaling> rope_scaling;
  int64_t max_position_embeddings = 0;

  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;

  int64_t moe_intermediate_size = 0;  // moe_inter_dim
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;    // n_activated_experts
  int64_t num_hash_layers = 0;        // n_hash_layers
  std::string scoring_func;           // score_func: sqrtsoftplus (softmax, sigmoid also parsed)
  std::string topk_method;            // noaux_tc
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;  // route_scale
  double swiglu_limit = 0;

  int64_t hc_mult = 0;
  int64_t hc_sinkhorn_iters = 0;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-6;         // norm_eps

  int64_t num_nextn_predict_layers = 0;  // as written in the HF config (NOT the stage count, §1.3)
  int64_t n_mtp_layers = 0;              // stage count: n_mtp_layers if given, else len(ratios) - layers

  bool tie_word_embeddings = false;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  std::string torch_dtype = "bfloat16";
  std::string hidden_act = "silu";

  WeightStorage linear_storage = WeightStorage::kFP8;  // quantization_config / dtype
  WeightStorage expert_storage = WeightStorage::kFP4;  // expert_dtype

  std::optional<DSparkConfig> dspark;

  // ---- derived ----
  int64_t num_layers_total() const { return num_hidden_layers + n_mtp_layers; }
  int64_t nope_head_dim() const { return head_dim - qk_rope_head_dim; }
  int64_t hc_dim() const { return hc_mult * hidden_size; }            // flattened mHC stream
  int64_t hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }      // 24 for hc = 4
  int64_t compress_ratio(int64_t layer) const;                        // layer in [0, num_layers_total)
  bool is_swa(int64_t layer) const { return compress_ratio(layer) == 0; }
  bool is_csa(int64_t layer) const { return compress_ratio(layer) == 4; }
  bool is_hca(int64_t layer) const { return compress_ratio(layer) != 0 && compress_ratio(layer) != 4; }
  bool is_hash_layer(int64_t layer) const { return layer < num_hash_layers; }  // never an MTP stage
  bool is_mtp_stage(int64_t layer) const { return layer >= num_hidden_layers; }
  // Tensor-name prefix of a layer: "layers.L." for the backbone, "mtp.K." for stage K.
  std::string layer_prefix(int64_t layer) const;

  // Parses and validates; errors name the file and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig load(const std::string& path);
  static ModelConfig parse(const std::string& text, const std::string& source);

  // Checks every constraint (§6.1 and the engine's own); throws core::Error naming the field.
  void validate(const std::string& source) const;

  std::string summary() const;  // a few human-readable lines
};

}  // namespace dsinfer::model
