// V4.1 configs (model-v41.md §1): the nested HF shape and the reference's flat names, the layer roles
// as data (§1.3, expected values written from the spec's schedule tables), the model registry, a
// clear error for every schedule rule the reference relies on without checking, and the tensor
// inventory against the released checkpoint's counts and shapes (§4.1, §4.2).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/engram_constants.h"
#include "model/inventory.h"
#include "model/registry.h"
#include "test_util.h"

namespace dsinfer::model {
namespace {

using nlohmann::json;
using testing::parse;
using testing::by_name;
using testing::expect_layout;
using testing::error_of;
using testing::small_v41_config;

// The released V4.1-Flash config.json (§1.1).
json flash_v41_config() {
  json ratios = json::array({0, 0});
  for (int i = 0; i < 18; ++i) ratios.push_back(2);
  for (int i = 0; i < 20; ++i) ratios.push_back(1);
  for (int i = 0; i < 3; ++i) ratios.push_back(0);
  json text = {{"model_type", "deepseek_v41_text"}, {"vocab_size", 129280}, {"hidden_size", 5120},
               {"moe_intermediate_size", 2304}, {"num_hidden_layers", 40}, {"num_attention_heads", 64},
               {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 1280},
               {"o_lora_rank", 1024}, {"o_groups", 8}, {"hidden_act", "silu"}, {"swiglu_limit", 10.0},
               {"rms_norm_eps", 1e-20}, {"attention_bias", false}, {"attention_dropout", 0.0},
               {"initializer_range", 0.02}, {"use_cache", true}, {"tie_word_embeddings", false},
               {"max_position_embeddings", 1048576}, {"rope_theta", 10000},
               {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 16}, {"beta_fast", 32}, {"beta_slow", 1},
                                 {"original_max_position_embeddings", 65536}}},
               {"n_routed_experts", 384}, {"n_shared_experts", 1}, {"num_experts_per_tok", 6},
               {"scoring_func", "sqrtsoftplus"}, {"topk_method", "noaux_tc"}, {"norm_topk_prob", true},
               {"routed_scaling_factor", 1.5}, {"sliding_window", 128}, {"compress_ratios", ratios},
               {"compress_rope_theta", 160000}, {"kv_source_layer_ids", {2, 8, 14, 20}},
               {"index_source_layer_ids", {2, 8, 14, 20, 24, 28, 32, 36}}, {"index_n_heads", 32},
               {"index_head_dim", 128}, {"index_topk", 512}, {"candidate_source_layer_id", 20},
               {"candidate_topk_blocks", 2048}, {"candidate_block_size", 8}, {"hc_mult", 4},
               {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"engram_layer_ids", {1, 14}},
               {"engram_num_embeddings", {384006168, 384016682}}, {"engram_max_ngram_size", 4},
               {"engram_vocab_size", 16000000}, {"engram_n_heads", 8}, {"engram_head_dim", 256},
               {"engram_pad_token_id", 2}, {"engram_compressed_vocab_size", 99092},
               {"num_nextn_predict_layers", 3}, {"dspark_block_size", 5}, {"dspark_noise_token_id", 128799},
               {"dspark_target_layer_ids", {37, 38, 39}}, {"dspark_markov_rank", 256},
               {"dspark_n_routed_experts", 128}, {"dspark_num_experts_per_tok", 3}};
  return {{"architectures", {"DeepseekV41ForCausalLM"}}, {"model_type", "deepseek_v41"},
          {"transformers_version", "5.6.0"}, {"dtype", "bfloat16"}, {"image_token_id", 129264},
          {"bos_token_id", 0}, {"eos_token_id", 1}, {"pad_token_id", 2}, {"tie_word_embeddings", false},
          {"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"},
                                   {"weight_block_size", {32, 32}}, {"scale_fmt", "ue8m0"}, {"expert_dtype", "fp4"}}},
          {"text_config", text},
          {"vision_config", {{"model_type", "deepseek_v41_vision"}, {"num_hidden_layers", 32}, {"hidden_size", 1024}}}};
}

struct ExpectedRoles {
  int64_t ratio, src, isrc;
  bool compressor, indexer, cand_source, cand_user;
  int64_t engram;
  bool tap;
};

void expect_roles(const ModelConfig& c, const std::vector<ExpectedRoles>& want) {
  ASSERT_EQ(c.roles.size(), want.size());
  for (size_t L = 0; L < want.size(); ++L) {
    const LayerRoles& r = c.layer_roles(static_cast<int64_t>(L));
    const ExpectedRoles& w = want[L];
    EXPECT_EQ(r.ratio, w.ratio) << "layer " << L;
    EXPECT_EQ(r.kv_source, w.src) << "layer " << L;
    EXPECT_EQ(r.index_source, w.isrc) << "layer " << L;
    EXPECT_EQ(r.owns_compressor, w.compressor) << "layer " << L;
    EXPECT_EQ(r.owns_indexer, w.indexer) << "layer " << L;
    EXPECT_EQ(r.candidate_source, w.cand_source) << "layer " << L;
    EXPECT_EQ(r.candidate_user, w.cand_user) << "layer " << L;
    EXPECT_EQ(r.engram, w.engram) << "layer " << L;
    EXPECT_EQ(r.dspark_target, w.tap) << "layer " << L;
  }
}

TEST(ModelConfigV41, TinyFromConfigsHasTheSpecRoles) {
  const ModelConfig c = ModelConfig::load(std::string(DSINFER_SOURCE_DIR) + "/configs/tiny-v41.json");
  EXPECT_EQ(c.architecture, "DeepseekV41ForCausalLM");
  EXPECT_EQ(c.arch, Architecture::kDeepseekV41);
  EXPECT_EQ(c.model_type, "deepseek_v41");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_hidden_layers, 10);
  EXPECT_EQ(c.n_mtp_layers, 3);
  EXPECT_EQ(c.weight_block, 32);
  EXPECT_EQ(c.activation_block, 32);
  EXPECT_EQ(c.rms_norm_eps, 1e-20);
  EXPECT_TRUE(c.deferred_mix);
  EXPECT_FALSE(c.q_head_norm);
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.gate_temp, 1.0);
  EXPECT_EQ(c.linear_storage, WeightStorage::kFP8);
  EXPECT_EQ(c.expert_storage, WeightStorage::kFP4);
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "yarn");
  ASSERT_TRUE(c.engram.has_value());
  EXPECT_EQ(c.engram->columns(), 12);
  EXPECT_EQ(c.engram->compressed_vocab_size, 99092);
  ASSERT_TRUE(c.dspark.has_value());
  EXPECT_EQ(c.routed_experts_of(9), 16);
  EXPECT_EQ(c.routed_experts_of(10), 8);
  EXPECT_EQ(c.experts_per_tok_of(9), 4);
  EXPECT_EQ(c.experts_per_tok_of(12), 2);
  // §6 TINY: kv sources 2, 4 (ratio 2), 6, 8 (ratio 1); index sources 2, 4, 5, 6, 8, 9 (3 and 7 pure
  // consumers); candidate source 6 (users 8, 9); Engram 1 (k 0) and 4 (k 1); DSpark taps 7, 8, 9.
  expect_roles(c, {
                      {0, -1, -1, false, false, false, false, -1, false},
                      {0, -1, -1, false, false, false, false, 0, false},
                      {2, 2, 2, true, true, false, false, -1, false},
                      {2, 2, 2, false, false, false, false, -1, false},
                      {2, 4, 4, true, true, false, false, 1, false},
                      {2, 4, 5, false, true, false, false, -1, false},
                      {1, 6, 6, true, true, true, false, -1, false},
                      {1, 6, 6, false, false, false, false, -1, true},
                      {1, 8, 8, true, true, false, true, -1, true},
                      {1, 8, 9, false, true, false, true, -1, true},
                      {0, -1, -1, false, false, false, false, -1, false},
                      {0, -1, -1, false, false, false, false, -1, false},
                      {0, -1, -1, false, false, false, false, -1, false},
                  });
  const std::string s = c.summary();
  EXPECT_NE(s.find("DeepseekV41ForCausalLM"), std::string::npos) << s;
  EXPECT_NE(s.find("4 ratio 2, 4 ratio 1"), std::string::npos) << s;
  EXPECT_NE(s.find("FP8 blocks 32x32"), std::string::npos) << s;
}

TEST(ModelConfigV41, MediumFromConfigs) {
  const ModelConfig c = ModelConfig::load(std::string(DSINFER_SOURCE_DIR) + "/configs/medium-v41.json");
  EXPECT_EQ(c.num_hidden_layers, 12);
  EXPECT_EQ(c.n_mtp_layers, 3);
  // §6 MEDIUM: kv sources 2, 5, 7; index sources 2, 5, 7, 9, 11; candidate source 7.
  EXPECT_EQ(c.layer_roles(4).kv_source, 2);
  EXPECT_EQ(c.layer_roles(6).kv_source, 5);
  EXPECT_EQ(c.layer_roles(6).ratio, 2);
  EXPECT_EQ(c.layer_roles(10).kv_source, 7);
  EXPECT_EQ(c.layer_roles(10).index_source, 9);
  EXPECT_TRUE(c.layer_roles(11).candidate_user);
  EXPECT_TRUE(c.layer_roles(7).candidate_source);
  EXPECT_FALSE(c.layer_roles(7).candidate_user);
  EXPECT_EQ(c.layer_roles(5).engram, 1);
}

TEST(ModelConfigV41, ReleasedScheduleMatchesTheSpecTable) {
  const ModelConfig c = parse(flash_v41_config());
  // §1.3 "Released schedule".
  for (int64_t L = 0; L < 40; ++L) {
    const LayerRoles& r = c.layer_roles(L);
    const int64_t ratio = L < 2 ? 0 : L < 20 ? 2 : 1;
    EXPECT_EQ(r.ratio, ratio) << L;
    if (ratio == 0) {
      EXPECT_EQ(r.kv_source, -1) << L;
      continue;
    }
    const int64_t src = L < 8 ? 2 : L < 14 ? 8 : L < 20 ? 14 : 20;
    const int64_t isrc = L < 24 ? src : L < 28 ? 24 : L < 32 ? 28 : L < 36 ? 32 : 36;
    EXPECT_EQ(r.kv_source, src) << L;
    EXPECT_EQ(r.index_source, isrc) << L;
    EXPECT_EQ(r.candidate_source, L == 20) << L;
    EXPECT_EQ(r.candidate_user, L == 24 || L == 28 || L == 32 || L == 36) << L;
    EXPECT_EQ(r.dspark_target, L >= 37) << L;
  }
  EXPECT_EQ(c.layer_roles(1).engram, 0);
  EXPECT_EQ(c.layer_roles(14).engram, 1);
  EXPECT_TRUE(c.layer_roles(14).owns_compressor);
  EXPECT_EQ(c.routed_experts_of(40), 128);
  EXPECT_EQ(c.experts_per_tok_of(42), 3);
}

TEST(ModelConfigV41, EngramPrimesAndOffsetsAreTheReleasedOnes) {
  const ModelConfig c = parse(flash_v41_config());
  const auto primes = engram_primes(*c.engram);
  ASSERT_EQ(primes.size(), 2u);
  ASSERT_EQ(primes[0].size(), 24u);
  // Appendix A.1.
  const std::vector<int64_t> first = {16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183};
  EXPECT_EQ(std::vector<int64_t>(primes[0].begin(), primes[0].begin() + 8), first);
  EXPECT_EQ(primes[0].back(), 16000463);
  EXPECT_EQ(primes[1].front(), 16000477);
  EXPECT_EQ(primes[1].back(), 16000889);
  const auto offsets = engram_offsets(primes);
  EXPECT_EQ(offsets[0][0], 0);
  EXPECT_EQ(offsets[0][1], 16000057);
  EXPECT_EQ(offsets[0][2], 32000136);
  EXPECT_EQ(offsets[1][23] + primes[1][23], 384016682);
}

TEST(ModelConfigV41, ReferenceNamesAreAccepted) {
  // §1.2: the reference's flat inference/config.json names, no architectures field.
  json flat = small_v41_config()["text_config"];
  json ref;
  ref["dim"] = flat["hidden_size"];
  ref["moe_inter_dim"] = flat["moe_intermediate_size"];
  ref["n_layers"] = flat["num_hidden_layers"];
  ref["n_heads"] = flat["num_attention_heads"];
  ref["n_activated_experts"] = flat["num_experts_per_tok"];
  ref["score_func"] = flat["scoring_func"];
  ref["route_scale"] = flat["routed_scaling_factor"];
  ref["rope_head_dim"] = flat["qk_rope_head_dim"];
  ref["norm_eps"] = flat["rms_norm_eps"];
  ref["window_size"] = flat["sliding_window"];
  ref["kv_source_layers"] = flat["kv_source_layer_ids"];
  ref["index_source_layers"] = flat["index_source_layer_ids"];
  ref["candidate_source_layer"] = flat["candidate_source_layer_id"];
  ref["engram_pad_id"] = flat["engram_pad_token_id"];
  ref["dspark_n_activated_experts"] = flat["dspark_num_experts_per_tok"];
  ref["n_mtp_layers"] = 3;
  ref["rope_factor"] = 16;
  ref["original_seq_len"] = 65536;
  ref["dtype"] = "fp8";
  ref["expert_dtype"] = "fp4";
  for (const char* same : {"vocab_size", "head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "n_routed_experts",
                           "n_shared_experts", "swiglu_limit", "compress_ratios", "compress_rope_theta",
                           "rope_theta", "index_n_heads", "index_head_dim", "index_topk", "candidate_topk_blocks",
                           "candidate_block_size", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "engram_layer_ids",
                           "engram_num_embeddings", "engram_max_ngram_size", "engram_vocab_size", "engram_n_heads",
                           "engram_head_dim", "engram_compressed_vocab_size", "dspark_block_size",
                           "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank",
                           "dspark_n_routed_experts"}) {
    ref[same] = flat[same];
  }
  const ModelConfig c = parse(ref);
  EXPECT_EQ(c.arch, Architecture::kDeepseekV41);
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.layer_roles(9).index_source, 9);
  EXPECT_EQ(c.candidate_source_layer_id, 6);
  EXPECT_EQ(c.engram->pad_token_id, 2);
  EXPECT_EQ(c.experts_per_tok_of(10), 1);
  EXPECT_EQ(c.num_nextn_predict_layers, 3);
}

TEST(ModelRegistry, DispatchesOnArchitectures) {
  ASSERT_NE(find_architecture("DeepseekV4ForCausalLM"), nullptr);
  ASSERT_NE(find_architecture("DeepseekV41ForCausalLM"), nullptr);
  EXPECT_EQ(find_architecture("DeepseekV41ForCausalLM")->id, Architecture::kDeepseekV41);
  EXPECT_EQ(find_architecture("DeepseekV41ForCausalLM")->weight_block, 32);
  EXPECT_EQ(find_architecture("DeepseekV4ForCausalLM")->weight_block, 128);
  EXPECT_EQ(find_architecture("LlamaForCausalLM"), nullptr);
  json j = small_v41_config();
  j["architectures"] = {"LlamaForCausalLM"};
  const std::string msg = error_of([&] { parse(j); });
  EXPECT_NE(msg.find("'LlamaForCausalLM'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("DeepseekV4ForCausalLM, DeepseekV41ForCausalLM"), std::string::npos) << msg;
}

TEST(ModelConfigV41, BadConfigsGiveClearErrors) {
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    std::vector<std::string> expect;
  };
  auto text = [](json& j) -> json& { return j["text_config"]; };
  const std::vector<Case> cases = {
      {"V4 weight blocks", [](json& j) { j["quantization_config"]["weight_block_size"] = {128, 128}; },
       {"weight_block_size", "[32, 32]"}},
      {"no weight blocks", [](json& j) { j["quantization_config"].erase("weight_block_size"); },
       {"weight_block_size", "[32, 32]"}},
      {"wrong model_type", [](json& j) { j["model_type"] = "deepseek_v4"; }, {"'model_type'", "deepseek_v41"}},
      {"wrong text model_type", [&](json& j) { text(j)["model_type"] = "deepseek_v4"; },
       {"text_config.model_type", "deepseek_v41_text"}},
      {"top level and text_config disagree", [](json& j) { j["eos_token_id"] = 7; j["text_config"]["eos_token_id"] = 1; },
       {"'eos_token_id'", "text_config"}},
      {"ratio 3", [&](json& j) { text(j)["compress_ratios"][3] = 3; }, {"compress_ratios[3]", "0, 1 or 2"}},
      {"rule 1: kv source not an index source", [&](json& j) { text(j)["index_source_layer_ids"] = {2, 5, 6, 8, 9}; },
       {"'index_source_layer_ids'", "layer 4", "rule 1"}},
      {"rule 2: no kv source before", [&](json& j) { text(j)["kv_source_layer_ids"] = {4, 6, 8}; text(j)["index_source_layer_ids"] = {2, 4, 5, 6, 8, 9}; },
       {"'kv_source_layer_ids'", "layer 2", "rule 2"}},
      {"rule 2: ratio change without a new kv source", [&](json& j) { text(j)["kv_source_layer_ids"] = {2, 4, 8}; },
       {"'kv_source_layer_ids'", "layer 6 (ratio 1)", "layer 4 (ratio 2)", "rule 2"}},
      {"rule 4: SWA layer as kv source", [&](json& j) { text(j)["kv_source_layer_ids"] = {1, 2, 4, 6, 8}; },
       {"'kv_source_layer_ids'", "layer 1", "rule 4"}},
      {"rule 4: SWA layer as index source", [&](json& j) { text(j)["index_source_layer_ids"] = {0, 2, 4, 5, 6, 8, 9}; },
       {"'index_source_layer_ids'", "layer 0", "rule 4"}},
      {"rule 5: candidate source not an index source", [&](json& j) { text(j)["candidate_source_layer_id"] = 7; },
       {"'candidate_source_layer_id'", "rule 5"}},
      {"rule 5: candidate user of another ratio", [&](json& j) { text(j)["candidate_source_layer_id"] = 2; },
       {"'index_source_layer_ids'", "candidate source 2", "rule 5"}},
      {"rule 6: too few candidate positions", [&](json& j) { text(j)["candidate_topk_blocks"] = 2; },
       {"'candidate_topk_blocks'", "index_topk (4)", "rule 6"}},
      {"rule 7: hidden size", [&](json& j) { text(j)["hidden_size"] = 144; }, {"'hidden_size'", "32"}},
      {"rule 7: engram head dim", [&](json& j) { text(j)["engram_head_dim"] = 48; }, {"'engram_head_dim'", "32"}},
      {"rule 8: engram rows", [&](json& j) { text(j)["engram_num_embeddings"] = {240, 300}; },
       {"'engram_num_embeddings'", "[1] (300)", "306", "rule 8"}},
      {"engram layer out of range", [&](json& j) { text(j)["engram_layer_ids"] = {1, 10}; },
       {"'engram_layer_ids'", "entry 10"}},
      {"engram compressed vocab above vocab", [&](json& j) { text(j)["engram_compressed_vocab_size"] = 513; },
       {"'engram_compressed_vocab_size'"}},
      {"unsorted kv sources", [&](json& j) { text(j)["kv_source_layer_ids"] = {4, 2, 6, 8}; },
       {"'kv_source_layer_ids'", "strictly increasing"}},
      {"hash layers", [&](json& j) { text(j)["num_hash_layers"] = 1; }, {"'num_hash_layers'", "V4.1"}},
      {"stage count", [&](json& j) { text(j)["num_nextn_predict_layers"] = 1; }, {"'num_nextn_predict_layers'"}},
      {"dspark top-k", [&](json& j) { text(j)["dspark_num_experts_per_tok"] = 3; }, {"'dspark_num_experts_per_tok'"}},
      {"gate_temp", [&](json& j) { text(j)["gate_temp"] = 0; }, {"'gate_temp'"}},
      {"no kv source list", [&](json& j) { text(j).erase("kv_source_layer_ids"); }, {"'kv_source_layer_ids'", "missing"}},
      {"engram vocab too large", [&](json& j) { text(j)["engram_vocab_size"] = int64_t{1} << 40; },
       {"'engram_vocab_size'", "limit"}},
  };
  for (const Case& c : cases) {
    json j = small_v41_config();
    c.edit(j);
    const std::string msg = error_of([&] { parse(j); });
    for (const std::string& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.what << ": " << msg;
  }
}

TEST(InventoryV41, ReleasedCountMatchesTheOfficialIndex) {
  const auto specs = expected_tensors(parse(flash_v41_config()));
  EXPECT_EQ(specs.size(), 95819u);  // §4.2 count check: 95 819 text tensors
  size_t mtp = 0;
  for (const auto& s : specs) mtp += s.name.rfind("mtp.", 0) == 0;
  EXPECT_EQ(mtp, 2401u);  // DSpark
  EXPECT_EQ(by_name(specs).size(), specs.size()) << "duplicate names";
}

TEST(InventoryV41, ReleasedShapesMatchTheSpecTable) {
  using core::DType;
  const auto specs = expected_tensors(parse(flash_v41_config()));
  const auto m = by_name(specs);
  expect_layout(m, "embed.weight", DType::kBF16, {129280, 5120});
  expect_layout(m, "head.weight", DType::kBF16, {129280, 5120});
  expect_layout(m, "norm.weight", DType::kBF16, {5120});
  EXPECT_EQ(m.count("hc_head_fn"), 0u);
  const std::string L = "layers.3.";  // a pure consumer: no compressor, no indexer
  expect_layout(m, L + "hc_attn_fn", DType::kF32, {24, 20480});
  expect_layout(m, L + "hc_ffn_scale", DType::kF32, {3});
  expect_layout(m, L + "attn.attn_sink", DType::kF32, {64});
  expect_layout(m, L + "attn.wq_a.weight", DType::kF8E4M3, {1280, 5120});
  expect_layout(m, L + "attn.wq_a.scale", DType::kF8E8M0, {40, 160});
  expect_layout(m, L + "attn.q_norm.weight", DType::kBF16, {1280});
  expect_layout(m, L + "attn.wq_b.scale", DType::kF8E8M0, {1024, 40});
  expect_layout(m, L + "attn.wkv.scale", DType::kF8E8M0, {16, 160});
  expect_layout(m, L + "attn.wo_a.weight", DType::kF8E4M3, {8192, 4096});
  expect_layout(m, L + "attn.wo_a.scale", DType::kF8E8M0, {256, 128});
  expect_layout(m, L + "attn.wo_b.scale", DType::kF8E8M0, {160, 256});
  expect_layout(m, L + "ffn.gate.weight", DType::kBF16, {384, 5120});
  expect_layout(m, L + "ffn.gate.bias", DType::kF32, {384});
  expect_layout(m, L + "ffn.gate.bias_vl", DType::kF32, {384});
  expect_layout(m, L + "ffn.shared_experts.w1.scale", DType::kF8E8M0, {72, 160});
  expect_layout(m, L + "ffn.shared_experts.w2.scale", DType::kF8E8M0, {160, 72});
  expect_layout(m, L + "ffn.experts.383.w1.weight", DType::kI8, {2304, 2560});
  expect_layout(m, L + "ffn.experts.383.w1.scale", DType::kF8E8M0, {2304, 160});
  expect_layout(m, L + "ffn.experts.0.w2.weight", DType::kI8, {5120, 1152});
  expect_layout(m, L + "ffn.experts.0.w2.scale", DType::kF8E8M0, {5120, 72});
  for (const char* absent : {"attn.compressor.wkv.weight", "attn.indexer.wq_b.weight", "attn.indexer.wk.weight",
                             "ffn.gate.tid2eid", "attn.compressor.ape"}) {
    EXPECT_EQ(m.count(L + absent), 0u) << absent;
  }
  // kv sources: ratio-2 ones with wgate, layer 20 (ratio 1) without.
  expect_layout(m, "layers.14.attn.compressor.wkv.weight", DType::kBF16, {512, 5120});
  expect_layout(m, "layers.14.attn.compressor.wgate.weight", DType::kBF16, {512, 5120});
  expect_layout(m, "layers.14.attn.compressor.norm.weight", DType::kBF16, {512});
  expect_layout(m, "layers.14.attn.indexer.wk.weight", DType::kBF16, {128, 512});
  expect_layout(m, "layers.14.attn.indexer.k_norm.weight", DType::kBF16, {128});
  expect_layout(m, "layers.20.attn.compressor.wkv.weight", DType::kBF16, {512, 5120});
  EXPECT_EQ(m.count("layers.20.attn.compressor.wgate.weight"), 0u);
  // Index sources that are not kv sources: wq_b and weights_proj only.
  expect_layout(m, "layers.24.attn.indexer.wq_b.weight", DType::kF8E4M3, {4096, 1280});
  expect_layout(m, "layers.24.attn.indexer.wq_b.scale", DType::kF8E8M0, {128, 40});
  expect_layout(m, "layers.24.attn.indexer.weights_proj.weight", DType::kBF16, {32, 5120});
  EXPECT_EQ(m.count("layers.24.attn.indexer.wk.weight"), 0u);
  EXPECT_EQ(m.count("layers.24.attn.compressor.wkv.weight"), 0u);
  // Engram.
  expect_layout(m, "layers.1.engram.embed.weight", DType::kF8E4M3, {384006168, 256});
  expect_layout(m, "layers.1.engram.embed.scale", DType::kF8E8M0, {384006168, 8});
  expect_layout(m, "layers.14.engram.embed.weight", DType::kF8E4M3, {384016682, 256});
  expect_layout(m, "layers.14.engram.wkv.weight", DType::kF8E4M3, {25600, 6144});
  expect_layout(m, "layers.14.engram.wkv.scale", DType::kF8E8M0, {800, 192});
  expect_layout(m, "layers.14.engram.q_weight", DType::kBF16, {4, 5120});
  expect_layout(m, "layers.14.engram.k_weight", DType::kBF16, {4, 5120});
  // DSpark.
  expect_layout(m, "mtp.0.ffn.gate.weight", DType::kBF16, {128, 5120});
  expect_layout(m, "mtp.1.ffn.gate.bias_vl", DType::kF32, {128});
  expect_layout(m, "mtp.2.ffn.experts.127.w3.weight", DType::kI8, {2304, 2560});
  expect_layout(m, "mtp.0.main_proj.weight", DType::kF8E4M3, {5120, 15360});
  expect_layout(m, "mtp.0.main_proj.scale", DType::kF8E8M0, {160, 480});
  expect_layout(m, "mtp.0.main_norm.weight", DType::kBF16, {5120});
  expect_layout(m, "mtp.2.norm.weight", DType::kBF16, {5120});
  expect_layout(m, "mtp.2.markov_head.embed.weight", DType::kBF16, {129280, 256});
  expect_layout(m, "mtp.2.markov_head.head.weight", DType::kBF16, {129280, 256});
  expect_layout(m, "mtp.2.confidence_head.proj.weight", DType::kBF16, {1, 5376});
  EXPECT_EQ(m.count("mtp.2.hc_head_fn"), 0u);
  EXPECT_EQ(m.count("mtp.0.attn.compressor.wkv.weight"), 0u);
}

TEST(ModelConfigV41, V41FieldsInAV4ConfigAreRefused) {
  json j = testing::small_config();
  j["kv_source_layer_ids"] = {1};
  const std::string msg = error_of([&] { parse(j); });
  EXPECT_NE(msg.find("'kv_source_layer_ids' belongs to DeepseekV41ForCausalLM"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::model
