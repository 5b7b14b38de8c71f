// The inventory is checked against the real V4-Flash layout of model-v4.md §4.1/§4.2 (tensor counts
// from the official index, shapes from real headers), not against itself.
#include "model/inventory.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace dsinfer::model {
namespace {

using core::DType;
using nlohmann::json;
using testing::by_name;
using testing::expect_layout;

// V4-Flash config.json (§1.1).
json flash_config() {
  json ratios = json::array({0, 0});
  for (int i = 0; i < 20; ++i) {
    ratios.push_back(4);
    ratios.push_back(128);
  }
  ratios.push_back(4);
  ratios.push_back(0);  // MTP
  return {{"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"},
          {"vocab_size", 129280}, {"hidden_size", 4096}, {"num_hidden_layers", 43},
          {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64},
          {"q_lora_rank", 1024}, {"o_groups", 8}, {"o_lora_rank", 1024}, {"sliding_window", 128},
          {"compress_ratios", ratios}, {"compress_rope_theta", 160000}, {"rope_theta", 10000},
          {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                            {"beta_fast", 32}, {"beta_slow", 1}}},
          {"max_position_embeddings", 1048576}, {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512},
          {"moe_intermediate_size", 2048}, {"n_routed_experts", 256}, {"n_shared_experts", 1},
          {"num_experts_per_tok", 6}, {"num_hash_layers", 3}, {"scoring_func", "sqrtsoftplus"},
          {"topk_method", "noaux_tc"}, {"norm_topk_prob", true}, {"routed_scaling_factor", 1.5},
          {"swiglu_limit", 10.0}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
          {"rms_norm_eps", 1e-6}, {"num_nextn_predict_layers", 1}, {"tie_word_embeddings", false},
          {"bos_token_id", 0}, {"eos_token_id", 1}, {"torch_dtype", "bfloat16"}, {"hidden_act", "silu"},
          {"expert_dtype", "fp4"},
          {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"},
                                   {"scale_fmt", "ue8m0"}, {"weight_block_size", {128, 128}}}}};
}

TEST(Inventory, V4FlashCountsMatchTheOfficialIndex) {
  const ModelConfig c = ModelConfig::from_json(flash_config(), "flash");
  const auto specs = expected_tensors(c);
  size_t mtp = 0;
  for (const auto& s : specs) mtp += s.name.rfind("mtp.0.", 0) == 0;
  EXPECT_EQ(specs.size(), 69187u);  // §4.1: 69 187 tensors
  EXPECT_EQ(mtp, 1575u);            // of which 1 575 are mtp.0.*
  EXPECT_EQ(by_name(specs).size(), specs.size()) << "duplicate names";
}

TEST(Inventory, V4Flash0731DSparkCounts) {
  json j = flash_config();
  j["compress_ratios"].push_back(0);
  j["compress_ratios"].push_back(0);
  j["dspark_block_size"] = 5;
  j["dspark_noise_token_id"] = 128799;
  j["dspark_target_layer_ids"] = {40, 41, 42};
  j["dspark_markov_rank"] = 256;
  const ModelConfig c = ModelConfig::from_json(j, "0731");
  const auto specs = expected_tensors(c);
  size_t mtp = 0;
  for (const auto& s : specs) mtp += s.name.rfind("mtp.", 0) == 0;
  EXPECT_EQ(specs.size(), 72317u);  // §1.3 / §4.1: 72 317 tensors
  EXPECT_EQ(mtp, 4705u);            // 4 705 mtp.* tensors
  const auto m = by_name(specs);
  expect_layout(m, "mtp.0.main_proj.weight", DType::kF8E4M3, {4096, 12288});
  expect_layout(m, "mtp.0.main_proj.scale", DType::kF8E8M0, {32, 96});
  expect_layout(m, "mtp.0.main_norm.weight", DType::kBF16, {4096});
  expect_layout(m, "mtp.2.norm.weight", DType::kBF16, {4096});
  expect_layout(m, "mtp.2.hc_head_fn", DType::kF32, {4, 16384});
  expect_layout(m, "mtp.2.markov_head.markov_w1.weight", DType::kBF16, {129280, 256});
  expect_layout(m, "mtp.2.markov_head.markov_w2.weight", DType::kBF16, {129280, 256});
  expect_layout(m, "mtp.2.confidence_head.proj.weight", DType::kBF16, {1, 4352});
  EXPECT_EQ(m.count("mtp.0.e_proj.weight"), 0u);
  EXPECT_EQ(m.count("mtp.1.main_proj.weight"), 0u);
  EXPECT_EQ(m.count("mtp.0.norm.weight"), 0u);
}

TEST(Inventory, V4FlashShapesMatchTheSpecTable) {
  const auto specs = expected_tensors(ModelConfig::from_json(flash_config(), "flash"));
  const auto m = by_name(specs);
  expect_layout(m, "embed.weight", DType::kBF16, {129280, 4096});
  expect_layout(m, "head.weight", DType::kBF16, {129280, 4096});
  expect_layout(m, "norm.weight", DType::kBF16, {4096});
  expect_layout(m, "hc_head_fn", DType::kF32, {4, 16384});
  expect_layout(m, "hc_head_base", DType::kF32, {4});
  expect_layout(m, "hc_head_scale", DType::kF32, {1});
  const std::string L = "layers.2.";
  expect_layout(m, L + "attn_norm.weight", DType::kBF16, {4096});
  expect_layout(m, L + "hc_attn_fn", DType::kF32, {24, 16384});
  expect_layout(m, L + "hc_ffn_base", DType::kF32, {24});
  expect_layout(m, L + "hc_ffn_scale", DType::kF32, {3});
  expect_layout(m, L + "attn.attn_sink", DType::kF32, {64});
  expect_layout(m, L + "attn.wq_a.weight", DType::kF8E4M3, {1024, 4096});
  expect_layout(m, L + "attn.wq_a.scale", DType::kF8E8M0, {8, 32});
  expect_layout(m, L + "attn.q_norm.weight", DType::kBF16, {1024});
  expect_layout(m, L + "attn.wq_b.weight", DType::kF8E4M3, {32768, 1024});
  expect_layout(m, L + "attn.wq_b.scale", DType::kF8E8M0, {256, 8});
  expect_layout(m, L + "attn.wkv.scale", DType::kF8E8M0, {4, 32});
  expect_layout(m, L + "attn.kv_norm.weight", DType::kBF16, {512});
  expect_layout(m, L + "attn.wo_a.weight", DType::kF8E4M3, {8192, 4096});
  expect_layout(m, L + "attn.wo_a.scale", DType::kF8E8M0, {64, 32});
  expect_layout(m, L + "attn.wo_b.weight", DType::kF8E4M3, {4096, 8192});
  expect_layout(m, L + "attn.wo_b.scale", DType::kF8E8M0, {32, 64});
  expect_layout(m, L + "ffn.gate.weight", DType::kBF16, {256, 4096});
  expect_layout(m, L + "ffn.gate.tid2eid", DType::kI64, {129280, 6});
  expect_layout(m, L + "ffn.shared_experts.w1.scale", DType::kF8E8M0, {16, 32});
  expect_layout(m, L + "ffn.shared_experts.w2.weight", DType::kF8E4M3, {4096, 2048});
  expect_layout(m, L + "ffn.shared_experts.w2.scale", DType::kF8E8M0, {32, 16});
  expect_layout(m, L + "ffn.experts.255.w1.weight", DType::kI8, {2048, 2048});
  expect_layout(m, L + "ffn.experts.255.w1.scale", DType::kF8E8M0, {2048, 128});
  expect_layout(m, L + "ffn.experts.0.w3.weight", DType::kI8, {2048, 2048});
  expect_layout(m, L + "ffn.experts.0.w2.weight", DType::kI8, {4096, 1024});
  expect_layout(m, L + "ffn.experts.0.w2.scale", DType::kF8E8M0, {4096, 64});
  // CSA extras (layer 2).
  expect_layout(m, L + "attn.compressor.wkv.weight", DType::kBF16, {1024, 4096});
  expect_layout(m, L + "attn.compressor.wgate.weight", DType::kBF16, {1024, 4096});
  expect_layout(m, L + "attn.compressor.ape", DType::kF32, {4, 1024});
  expect_layout(m, L + "attn.compressor.norm.weight", DType::kBF16, {512});
  expect_layout(m, L + "attn.indexer.wq_b.weight", DType::kF8E4M3, {8192, 1024});
  expect_layout(m, L + "attn.indexer.wq_b.scale", DType::kF8E8M0, {64, 8});
  expect_layout(m, L + "attn.indexer.weights_proj.weight", DType::kBF16, {64, 4096});
  expect_layout(m, L + "attn.indexer.compressor.wkv.weight", DType::kBF16, {256, 4096});
  expect_layout(m, L + "attn.indexer.compressor.ape", DType::kF32, {4, 256});
  expect_layout(m, L + "attn.indexer.compressor.norm.weight", DType::kBF16, {128});
  // HCA extras (layer 3), score routing from layer 3 on.
  expect_layout(m, "layers.3.attn.compressor.wkv.weight", DType::kBF16, {512, 4096});
  expect_layout(m, "layers.3.attn.compressor.ape", DType::kF32, {128, 512});
  expect_layout(m, "layers.3.ffn.gate.bias", DType::kF32, {256});
  EXPECT_EQ(m.count("layers.3.attn.indexer.wq_b.weight"), 0u);
  EXPECT_EQ(m.count("layers.3.ffn.gate.tid2eid"), 0u);
  EXPECT_EQ(m.count("layers.2.ffn.gate.bias"), 0u);
  EXPECT_EQ(m.count("layers.0.attn.compressor.wkv.weight"), 0u);
  // MTP.
  expect_layout(m, "mtp.0.e_proj.weight", DType::kF8E4M3, {4096, 4096});
  expect_layout(m, "mtp.0.h_proj.scale", DType::kF8E8M0, {32, 32});
  expect_layout(m, "mtp.0.enorm.weight", DType::kBF16, {4096});
  expect_layout(m, "mtp.0.hnorm.weight", DType::kBF16, {4096});
  expect_layout(m, "mtp.0.norm.weight", DType::kBF16, {4096});
  expect_layout(m, "mtp.0.hc_head_base", DType::kF32, {4});
  expect_layout(m, "mtp.0.ffn.gate.bias", DType::kF32, {256});
  EXPECT_EQ(m.count("mtp.0.attn.compressor.wkv.weight"), 0u);
  EXPECT_EQ(m.count("mtp.0.embed.weight"), 0u);
}

TEST(Inventory, LinearMetadataAndScalesFollowWeights) {
  const auto specs = expected_tensors(ModelConfig::from_json(testing::small_config(), "small"));
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    if (s.kind != TensorKind::kLinearWeight) continue;
    EXPECT_EQ(s.name, s.linear + ".weight");
    EXPECT_GT(s.rows, 0);
    if (s.storage == WeightStorage::kBF16) {
      EXPECT_EQ(s.shape, (std::vector<int64_t>{s.rows, s.cols})) << s.name;
      continue;
    }
    ASSERT_LT(i + 1, specs.size());
    EXPECT_EQ(specs[i + 1].name, s.linear + ".scale");
    EXPECT_EQ(specs[i + 1].kind, TensorKind::kLinearScale);
  }
  const auto m = by_name(specs);
  // Small config: FP4 experts [128, 128] -> I8 [128, 64] + [128, 4]; layer 2 is HCA with ratio 8.
  expect_layout(m, "layers.0.ffn.experts.3.w2.weight", DType::kI8, {128, 64});
  expect_layout(m, "layers.0.ffn.experts.3.w2.scale", DType::kF8E8M0, {128, 4});
  expect_layout(m, "layers.2.attn.compressor.ape", DType::kF32, {8, 128});
  expect_layout(m, "layers.1.ffn.gate.tid2eid", DType::kI64, {512, 2});
  expect_layout(m, "layers.2.ffn.gate.bias", DType::kF32, {4});
  const auto names = linear_names(ModelConfig::from_json(testing::small_config(), "small"));
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.attn.indexer.wq_b"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "head"), names.end());
}

}  // namespace
}  // namespace dsinfer::model
