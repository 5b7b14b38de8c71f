// The model configuration of the DeepSeek-V4 family (model-v4.md §1, model-v41.md §1), parsed from a
// Hugging Face config.json or the reference's inference/config.json (its names, §1.2, are accepted as
// aliases), and validated against the hard constraints of each architecture (V4 §6.1, V4.1 §1.3/§1.5).
// Field names follow the HF config; the reference name is in the comment. V4.1's config nests the text
// model under `text_config`; it is read as if its fields stood at the top level.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dsinfer::model {

// The architectures this engine knows (model/registry.h has one entry for each).
enum class Architecture : uint8_t {
  kDeepseekV4,   // DeepseekV4ForCausalLM (model-v4.md)
  kDeepseekV41,  // DeepseekV41ForCausalLM (model-v41.md)
};

// How the checkpoint stores a family of linear weights.
enum class WeightStorage : uint8_t {
  kBF16,  // BF16 [out, in], no scale
  kFP8,   // F8_E4M3 [out, in] + F8_E8M0 (or F32) scale [ceil(out/B), ceil(in/B)], B = weight_block (128 / 32)
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
  // V4.1: the stages' own expert count and top-k (dspark_n_routed_experts, dspark_num_experts_per_tok);
  // 0 = as the backbone (V4-0731).
  int64_t n_routed_experts = 0;
  int64_t num_experts_per_tok = 0;
};

// V4.1 Engram n-gram memory (model-v41.md §2.15, Appendix A).
struct EngramConfig {
  std::vector<int64_t> layer_ids;       // order = the Engram layer index k (prime and multiplier order)
  std::vector<int64_t> num_embeddings;  // table rows per Engram layer (= the sum of its bucket primes)
  int64_t max_ngram_size = 0;           // N: n-grams of 2..N tokens
  int64_t vocab_size = 0;               // where the prime search starts (not a vocabulary)
  int64_t n_heads = 0;                  // H
  int64_t head_dim = 0;                 // table row width
  int64_t pad_token_id = 0;             // engram_pad_id: the token of n-gram slots before position 0
  int64_t compressed_vocab_size = 0;    // size of the compressed-token map; enters the hash multipliers
  int64_t columns() const { return (max_ngram_size - 1) * n_heads; }  // table lookups per Engram layer
  int64_t index_of(int64_t layer) const;                               // k, or -1
};

// What one layer does, as data (model-v41.md §1.3), so the forward pass and the inventory branch on
// roles, not on the architecture. Filled for every layer incl. MTP/DSpark stages by validate().
// V4 expressed in these terms: every compressed layer is its own kv source; CSA layers (ratio 4) are
// their own index source.
struct LayerRoles {
  int64_t ratio = 0;
  int64_t kv_source = -1;        // src(L): the layer whose compressed KV this layer reads; -1 = none
  int64_t index_source = -1;     // isrc(L): the layer whose top-k selection this layer uses; -1 = all visible
  bool owns_compressor = false;  // L is a kv source
  bool owns_indexer = false;     // L is an index source
  bool candidate_source = false;
  bool candidate_user = false;   // restricts its top-k to the candidate source's blocks (§2.8)
  int64_t engram = -1;           // k of L in engram.layer_ids; -1 = no Engram update before the block
  bool dspark_target = false;    // the block input (after Engram) is tapped for the draft head
};

struct ModelConfig {
  std::string architecture;  // "DeepseekV4ForCausalLM" / "DeepseekV41ForCausalLM" (architectures[0])
  std::string model_type;    // "deepseek_v4" / "deepseek_v41"
  Architecture arch = Architecture::kDeepseekV4;

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

  // Quantization block sizes (V4: 128 x 128 weights, activations per 128; V4.1: 32 x 32 and 32).
  int64_t weight_block = 128;      // quantization_config.weight_block_size (square)
  int64_t activation_block = 128;  // FP8 activation quantization block (reference numerics)

  // ---- V4.1 (model-v41.md §1.1); absent / defaults for V4 ----
  std::vector<int64_t> kv_source_layer_ids;     // kv_source_layers
  std::vector<int64_t> index_source_layer_ids;  // index_source_layers
  int64_t candidate_source_layer_id = -1;       // candidate_source_layer; -1 = no two-level selection
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  std::optional<EngramConfig> engram;
  double gate_temp = 1.0;           // router logits are divided by it
  int64_t pad_token_id = -1;        // -1 = not given
  int64_t image_token_id = -1;
  bool deferred_mix = false;        // mHC pre of the previous sub-layer (§2.2); no hc_head tensors
  bool q_head_norm = true;          // per-head RMS normalisation of q (V4 §2.4 step 3; V4.1 removed it)

  std::vector<LayerRoles> roles;    // one per layer incl. MTP/DSpark stages (computed by from_json)

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
  const LayerRoles& layer_roles(int64_t layer) const;  // layer in [0, num_layers_total)
  // Routed experts and top-k of a layer (DSpark stages of V4.1 have their own).
  int64_t routed_experts_of(int64_t layer) const;
  int64_t experts_per_tok_of(int64_t layer) const;
  // Tensor-name prefix of a layer: "layers.L." for the backbone, "mtp.K." for stage K.
  std::string layer_prefix(int64_t layer) const;

  // Parses and validates; errors name the file and the field.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source);
  static ModelConfig load(const std::string& path);
  static ModelConfig parse(const std::string& text, const std::string& source);

  // Checks every constraint (§6.1 and the engine's own); throws core::Error naming the field.
  // Does not look at `roles` (from_json computes them after validating).
  void validate(const std::string& source) const;

  std::string summary() const;  // a few human-readable lines
};

}  // namespace dsinfer::model
