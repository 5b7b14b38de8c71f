#include "model/config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace dsinfer::model {
namespace {

using nlohmann::json;
using testing::parse;
using testing::error_of;
using testing::small_config;

TEST(ModelConfig, TinyFromSharedConfigs) {
  const ModelConfig c = ModelConfig::load(std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json");
  EXPECT_EQ(c.architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 7);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.num_layers_total(), 8);
  EXPECT_EQ(c.nope_head_dim(), 64);
  EXPECT_EQ(c.hc_dim(), 1024);
  EXPECT_EQ(c.hc_mix_dim(), 24);
  EXPECT_EQ(c.index_head_dim, 64);
  EXPECT_EQ(c.index_topk, 8);
  EXPECT_EQ(c.linear_storage, WeightStorage::kFP8);
  EXPECT_EQ(c.expert_storage, WeightStorage::kFP4);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->factor, 16.0);
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 65536);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_FALSE(c.dspark.has_value());
  // Schedule [0, 0, 4, 32, 4, 32, 4, 0]: 0,1 SWA, even CSA, odd HCA, 7 = MTP (SWA).
  const int64_t ratios[] = {0, 0, 4, 32, 4, 32, 4, 0};
  for (int64_t L = 0; L < 8; ++L) {
    EXPECT_EQ(c.compress_ratio(L), ratios[L]) << L;
    EXPECT_EQ(c.is_swa(L), ratios[L] == 0) << L;
    EXPECT_EQ(c.is_csa(L), ratios[L] == 4) << L;
    EXPECT_EQ(c.is_hca(L), ratios[L] == 32) << L;
    EXPECT_EQ(c.is_hash_layer(L), L < 3) << L;
    EXPECT_EQ(c.is_mtp_stage(L), L == 7) << L;
  }
  EXPECT_EQ(c.layer_prefix(0), "layers.0.");
  EXPECT_EQ(c.layer_prefix(6), "layers.6.");
  EXPECT_EQ(c.layer_prefix(7), "mtp.0.");
  EXPECT_NE(error_of([&] { c.compress_ratio(8); }).find("layer 8 out of range"), std::string::npos);
  EXPECT_NE(c.summary().find("3 CSA, 2 HCA"), std::string::npos) << c.summary();
}

TEST(ModelConfig, MediumFromSharedConfigs) {
  const ModelConfig c = ModelConfig::load(std::string(DSINFER_SOURCE_DIR) + "/configs/medium.json");
  EXPECT_EQ(c.num_hidden_layers, 13);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.nope_head_dim(), 448);
  EXPECT_TRUE(c.is_csa(12));
  EXPECT_TRUE(c.is_hca(11));
  EXPECT_TRUE(c.is_swa(13));
}

TEST(ModelConfig, ReferenceNamesAreAliases) {
  json hf = small_config();
  json ref = hf;
  const std::pair<const char*, const char*> aliases[] = {
      {"hidden_size", "dim"},         {"num_hidden_layers", "n_layers"},     {"num_attention_heads", "n_heads"},
      {"qk_rope_head_dim", "rope_head_dim"}, {"sliding_window", "window_size"}, {"moe_intermediate_size", "moe_inter_dim"},
      {"num_experts_per_tok", "n_activated_experts"}, {"num_hash_layers", "n_hash_layers"},
      {"scoring_func", "score_func"}, {"routed_scaling_factor", "route_scale"}, {"rms_norm_eps", "norm_eps"}};
  for (auto [h, r] : aliases) {
    ref[r] = ref[h];
    ref.erase(h);
  }
  const ModelConfig a = parse(hf), b = parse(ref);
  EXPECT_EQ(b.hidden_size, a.hidden_size);
  EXPECT_EQ(b.num_hidden_layers, a.num_hidden_layers);
  EXPECT_EQ(b.sliding_window, a.sliding_window);
  EXPECT_EQ(b.moe_intermediate_size, a.moe_intermediate_size);
  EXPECT_EQ(b.num_experts_per_tok, a.num_experts_per_tok);
  EXPECT_EQ(b.num_hash_layers, a.num_hash_layers);
  EXPECT_EQ(b.scoring_func, a.scoring_func);
  EXPECT_EQ(b.routed_scaling_factor, a.routed_scaling_factor);

  json conflict = hf;
  conflict["dim"] = 256;
  const std::string msg = error_of([&] { parse(conflict); });
  EXPECT_NE(msg.find("'hidden_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'dim'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("disagree"), std::string::npos) << msg;
}

TEST(ModelConfig, ReferenceInferenceConfigStyle) {
  // The reference's inference/config.json: reference names only, no architectures, rope fields flat.
  json r = {{"vocab_size", 512},     {"dim", 128},          {"moe_inter_dim", 128},  {"n_layers", 2},
            {"n_hash_layers", 1},    {"n_heads", 2},        {"n_routed_experts", 4}, {"n_shared_experts", 1},
            {"n_activated_experts", 2}, {"score_func", "sqrtsoftplus"}, {"route_scale", 1.5},
            {"swiglu_limit", 10.0},  {"q_lora_rank", 128},  {"head_dim", 128},      {"rope_head_dim", 64},
            {"o_groups", 2},         {"o_lora_rank", 64},   {"window_size", 8},     {"original_seq_len", 65536},
            {"rope_theta", 10000},   {"rope_factor", 16},   {"beta_fast", 32},      {"beta_slow", 1},
            {"index_n_heads", 2},    {"index_head_dim", 64}, {"index_topk", 4},     {"hc_mult", 4},
            {"hc_sinkhorn_iters", 20}, {"dtype", "fp8"},    {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"},
            {"compress_rope_theta", 160000}, {"compress_ratios", {0, 4, 0}}};
  const ModelConfig c = parse(r);
  EXPECT_EQ(c.architecture, "DeepseekV4ForCausalLM");
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.n_mtp_layers, 1);
  EXPECT_EQ(c.linear_storage, WeightStorage::kFP8);
  EXPECT_EQ(c.expert_storage, WeightStorage::kFP4);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 65536);
  EXPECT_EQ(c.rope_scaling->factor, 16.0);
}

TEST(ModelConfig, MtpStageCountFromRatiosOrNMtpLayers) {
  // V4-Flash-0731 style: num_nextn_predict_layers stays 1, the stages come from compress_ratios.
  json j = small_config();
  j["compress_ratios"] = {0, 4, 8, 4, 0, 0, 0};
  j["dspark_block_size"] = 5;
  j["dspark_noise_token_id"] = 300;
  j["dspark_target_layer_ids"] = {1, 2, 3};
  j["dspark_markov_rank"] = 16;
  ModelConfig c = parse(j);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.n_mtp_layers, 3);
  ASSERT_TRUE(c.dspark.has_value());
  EXPECT_EQ(c.dspark->block_size, 5);
  EXPECT_EQ(c.dspark->target_layer_ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(c.layer_prefix(6), "mtp.2.");
  EXPECT_FALSE(c.is_hash_layer(4));

  j["n_mtp_layers"] = 3;
  EXPECT_EQ(parse(j).n_mtp_layers, 3);
  j["n_mtp_layers"] = 2;
  const std::string msg = error_of([&] { parse(j); });
  EXPECT_NE(msg.find("compress_ratios"), std::string::npos) << msg;
  EXPECT_NE(msg.find("7 entries"), std::string::npos) << msg;
}

TEST(ModelConfig, Bf16CheckpointsRelaxTheBlockConstraints) {
  json j = small_config();
  j.erase("quantization_config");
  j["expert_dtype"] = "bf16";
  j["hidden_size"] = 192;
  j["q_lora_rank"] = 96;
  j["moe_intermediate_size"] = 96;
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.linear_storage, WeightStorage::kBF16);
  EXPECT_EQ(c.expert_storage, WeightStorage::kBF16);
}

struct Violation {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> expect;  // substrings of the error message
};

TEST(ModelConfig, EveryConstraintViolationNamesTheField) {
  const std::vector<Violation> cases = {
      {"unknown architecture", [](json& j) { j["architectures"] = {"DeepseekV5ForCausalLM"}; },
       {"'architectures'", "DeepseekV5ForCausalLM", "known: DeepseekV4ForCausalLM, DeepseekV41ForCausalLM"}},
      // A V4 config relabelled V4.1 is refused for its V4 model_type (and would be for its missing fields).
      {"V4.1 label on a V4 config", [](json& j) { j["architectures"] = {"DeepseekV41ForCausalLM"}; },
       {"'model_type'", "deepseek_v41"}},
      {"wrong model_type", [](json& j) { j["model_type"] = "deepseek_v3"; }, {"'model_type'", "deepseek_v3"}},
      {"missing field", [](json& j) { j.erase("head_dim"); }, {"missing required field 'head_dim'"}},
      {"wrong type", [](json& j) { j["hidden_size"] = "128"; }, {"'hidden_size'", "must be an integer"}},
      {"float where integer", [](json& j) { j["vocab_size"] = 512.5; }, {"'vocab_size'", "integer"}},
      {"zero vocab", [](json& j) { j["vocab_size"] = 0; }, {"'vocab_size'", "positive"}},
      {"negative heads", [](json& j) { j["num_attention_heads"] = -2; }, {"'num_attention_heads'", "positive"}},
      {"kv heads", [](json& j) { j["num_key_value_heads"] = 2; }, {"'num_key_value_heads'", "must be 1"}},
      {"nope dims not /64", [](json& j) { j["head_dim"] = 160; }, {"'head_dim'", "divisible by 64"}},
      {"odd rope dim", [](json& j) { j["qk_rope_head_dim"] = 63; }, {"'qk_rope_head_dim'", "even"}},
      {"rope dim >= head dim", [](json& j) { j["qk_rope_head_dim"] = 128; }, {"'qk_rope_head_dim'", "smaller than head_dim"}},
      {"index dim not a power of two", [](json& j) { j["index_head_dim"] = 96; }, {"'index_head_dim'", "power of two"}},
      {"index dim below 32", [](json& j) {
         j["index_head_dim"] = 16;
         j["qk_rope_head_dim"] = 16;
         j["head_dim"] = 80;
       }, {"'index_head_dim'", ">= 32"}},
      {"index dim below rope dim", [](json& j) { j["index_head_dim"] = 32; }, {"'index_head_dim'", "rotary"}},
      {"hidden not /128", [](json& j) { j["hidden_size"] = 192; }, {"'hidden_size'", "divisible by 128"}},
      {"q_lora not /128", [](json& j) { j["q_lora_rank"] = 96; }, {"'q_lora_rank'", "divisible by 128"}},
      {"o_groups*o_lora not /128", [](json& j) { j["o_lora_rank"] = 32; }, {"'o_lora_rank'", "o_groups * o_lora_rank", "128"}},
      {"moe_intermediate not /128", [](json& j) { j["moe_intermediate_size"] = 64; }, {"'moe_intermediate_size'", "128"}},
      {"heads % o_groups", [](json& j) {
         j["num_attention_heads"] = 3;
         j["o_groups"] = 2;
       }, {"'num_attention_heads'", "divisible by o_groups"}},
      {"window below max ratio", [](json& j) { j["sliding_window"] = 4; }, {"'sliding_window'", "largest compress ratio (8)"}},
      {"ratios shorter than layers", [](json& j) { j["compress_ratios"] = {0, 4, 8}; }, {"'compress_ratios'", "3 entries"}},
      {"no MTP entry", [](json& j) { j["compress_ratios"] = {0, 4, 8, 4}; }, {"'compress_ratios'", "MTP"}},
      {"MTP entry not 0", [](json& j) { j["compress_ratios"] = {0, 4, 8, 4, 4}; }, {"'compress_ratios[4]'", "MTP stage 0"}},
      {"negative ratio", [](json& j) { j["compress_ratios"] = {0, -4, 8, 4, 0}; }, {"'compress_ratios[1]'", ">= 0"}},
      {"ratios not a list", [](json& j) { j["compress_ratios"] = 4; }, {"'compress_ratios'", "list"}},
      {"hash layers beyond layers", [](json& j) { j["num_hash_layers"] = 5; }, {"'num_hash_layers'", "num_hidden_layers = 4"}},
      {"experts per token", [](json& j) { j["num_experts_per_tok"] = 5; }, {"'num_experts_per_tok'", "n_routed_experts (4)"}},
      {"scoring func", [](json& j) { j["scoring_func"] = "relu"; }, {"'scoring_func'", "relu"}},
      {"topk method", [](json& j) { j["topk_method"] = "group_limited_greedy"; }, {"'topk_method'"}},
      {"hidden act", [](json& j) { j["hidden_act"] = "gelu"; }, {"'hidden_act'"}},
      {"tied embeddings", [](json& j) { j["tie_word_embeddings"] = true; }, {"'tie_word_embeddings'"}},
      {"eos beyond vocab", [](json& j) { j["eos_token_id"] = 512; }, {"'eos_token_id'", "vocab_size (512)"}},
      {"sinkhorn iters", [](json& j) { j["hc_sinkhorn_iters"] = 0; }, {"'hc_sinkhorn_iters'", "positive"}},
      {"hc_mult", [](json& j) { j["hc_mult"] = 0; }, {"'hc_mult'"}},
      {"eps", [](json& j) { j["rms_norm_eps"] = 0.0; }, {"'rms_norm_eps'", "positive"}},
      {"rope theta", [](json& j) { j["rope_theta"] = 0; }, {"'rope_theta'"}},
      {"index topk", [](json& j) { j["index_topk"] = 0; }, {"'index_topk'"}},
      {"yarn type", [](json& j) { j["rope_scaling"]["type"] = "linear"; }, {"'rope_scaling.type'"}},
      {"yarn factor", [](json& j) { j["rope_scaling"]["factor"] = 0.5; }, {"'rope_scaling.factor'"}},
      {"quant method", [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; }, {"quant_method", "gptq"}},
      {"block size", [](json& j) { j["quantization_config"]["weight_block_size"] = {32, 32}; }, {"weight_block_size", "[128, 128]"}},
      {"expert dtype", [](json& j) { j["expert_dtype"] = "int4"; }, {"'expert_dtype'", "int4"}},
      {"dspark targets", [](json& j) {
         j["compress_ratios"] = {0, 4, 8, 4, 0, 0};
         j["dspark_block_size"] = 5;
         j["dspark_noise_token_id"] = 3;
         j["dspark_target_layer_ids"] = {2, 4};
         j["dspark_markov_rank"] = 8;
       }, {"'dspark_target_layer_ids'", "entry 4"}},
      {"dspark noise token", [](json& j) {
         j["dspark_block_size"] = 5;
         j["dspark_noise_token_id"] = 9999;
         j["dspark_target_layer_ids"] = {2};
         j["dspark_markov_rank"] = 8;
       }, {"'dspark_noise_token_id'"}},
  };
  // The base config is valid.
  EXPECT_NO_THROW(parse(small_config()));
  for (const auto& c : cases) {
    json j = small_config();
    c.edit(j);
    const std::string msg = error_of([&] { parse(j); });
    EXPECT_NE(msg.find("test.json"), std::string::npos) << c.what << ": no source in: " << msg;
    for (const auto& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.what << ": '" << e << "' not in: " << msg;
  }
}

// The reported hostile configs: each is refused while parsing, before anything is sized from it (the
// tensor inventory, the window rings, the top-k buffers, the mHC loop), with an error naming the field.
TEST(ModelConfig, HostileSizesAreRefusedNamingTheField) {
  const int64_t huge = int64_t{1} << 40;
  const std::vector<Violation> cases = {
      {"1e8 routed experts (inspect grew to 4.6 GB)", [](json& j) { j["n_routed_experts"] = 100000000; },
       {"'n_routed_experts'", "100000000", "limit", "V4-Flash has 256"}},
      {"100,000 compress ratios (48 s, 6 GB)", [](json& j) { j["compress_ratios"] = std::vector<int64_t>(100000, 0); },
       {"'compress_ratios'", "100000 entries"}},
      {"sliding_window 2^40 (serve died with bad_alloc)", [&](json& j) { j["sliding_window"] = huge; },
       {"'sliding_window'", "1099511627776", "limit"}},
      {"index_topk 2^40 (every request a 500)", [&](json& j) { j["index_topk"] = huge; }, {"'index_topk'", "limit"}},
      {"index_topk beyond what the context holds", [](json& j) {
         j["max_position_embeddings"] = 64;
         j["index_topk"] = 32;
       }, {"'index_topk'", "16 compressed entries"}},
      {"hc_sinkhorn_iters 2^40 (first request hung)", [&](json& j) { j["hc_sinkhorn_iters"] = huge; },
       {"'hc_sinkhorn_iters'", "limit", "V4-Flash has 20"}},
      {"layers", [](json& j) { j["num_hidden_layers"] = 100000; }, {"'num_hidden_layers'", "limit"}},
      {"MTP stages", [](json& j) { j["n_mtp_layers"] = 1000; }, {"'n_mtp_layers'", "limit"}},
      {"MTP stages from the ratios", [](json& j) { j["compress_ratios"] = std::vector<int64_t>(100, 0); },
       {"'n_mtp_layers'", "len(compress_ratios)"}},
      {"vocab", [](json& j) { j["vocab_size"] = int64_t{1} << 40; }, {"'vocab_size'", "limit"}},
      {"hidden", [&](json& j) { j["hidden_size"] = huge; }, {"'hidden_size'", "limit"}},
      {"heads", [&](json& j) { j["num_attention_heads"] = huge; }, {"'num_attention_heads'", "limit"}},
      {"head dim", [&](json& j) { j["head_dim"] = huge; }, {"'head_dim'", "limit"}},
      {"max positions", [](json& j) { j["max_position_embeddings"] = int64_t{1} << 40; }, {"'max_position_embeddings'", "limit"}},
      {"moe width", [&](json& j) { j["moe_intermediate_size"] = huge; }, {"'moe_intermediate_size'", "limit"}},
      {"hc_mult", [](json& j) { j["hc_mult"] = 1000; }, {"'hc_mult'", "limit"}},
      {"experts x layers", [](json& j) {
         j["n_routed_experts"] = 4096;
         j["num_hidden_layers"] = 40;
         j["compress_ratios"] = std::vector<int64_t>(41, 0);
       }, {"'n_routed_experts'", "expert instances"}},
      {"huge ratio", [](json& j) { j["compress_ratios"] = {0, 4, int64_t{1} << 40, 4, 0}; }, {"'compress_ratios[2]'", "limit"}},
      {"ratios whose lcm explodes", [](json& j) {
         j["sliding_window"] = 4096;
         j["compress_ratios"] = {0, 3, 5, 7, 0};
       }, {"'compress_ratios[3]'", "least common multiple", "13440"}},
      {"integer beyond int64", [](json& j) { j["vocab_size"] = 18446744073709551615ull; }, {"'vocab_size'", "out of range"}},
      {"ratio beyond int64", [](json& j) { j["compress_ratios"] = {0, 4, 8, 4, 18446744073709551615ull}; },
       {"'compress_ratios'[4]", "must be an integer"}},
  };
  for (const auto& c : cases) {
    json j = small_config();
    c.edit(j);
    const std::string msg = error_of([&] { parse(j); });
    EXPECT_NE(msg.find("test.json"), std::string::npos) << c.what << ": no source in: " << msg;
    for (const auto& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.what << ": '" << e << "' not in: " << msg;
  }
  // A file far larger than any config is not read whole.
  testing::TempDir dir;
  const std::string big = dir.file("config.json");
  testing::write_bytes(big, "{\"pad\": \"" + std::string(2 << 20, 'x') + "\"}");
  EXPECT_NE(error_of([&] { ModelConfig::load(big); }).find("larger than"), std::string::npos);
  // A reference-style config whose YaRN factor would overflow the derived context length.
  json ref = small_config();
  ref.erase("max_position_embeddings");
  ref.erase("rope_scaling");
  ref.erase("hidden_size");
  ref["dim"] = 128;
  ref["rope_factor"] = 1e300;
  ref["original_seq_len"] = 65536;
  EXPECT_NE(error_of([&] { parse(ref); }).find("'max_position_embeddings'"), std::string::npos);
}

TEST(ModelConfig, InvalidJsonAndMissingFile) {
  EXPECT_NE(error_of([] { ModelConfig::parse("{\"vocab_size\": 1,", "bad.json"); }).find("bad.json: invalid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { ModelConfig::parse("[]", "arr.json"); }).find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of([] { ModelConfig::load("/nonexistent/config.json"); }).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace dsinfer::model
