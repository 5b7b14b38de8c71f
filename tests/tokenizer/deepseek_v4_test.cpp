#include "tokenizer/deepseek_v4.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

TEST(DeepseekV4, AddedTokenTablesFollowTheSpec) {
  for (const DeepseekVersion v : {DeepseekVersion::kV4, DeepseekVersion::kV41}) {
    const auto tokens = deepseek_added_tokens(v);
    ASSERT_EQ(tokens.size(), 3u + (kDeepseekVocabSize - 128000));  // 0..2 and every id from 128000 up
    std::set<std::string> contents;
    for (size_t i = 1; i < tokens.size(); ++i) ASSERT_LT(tokens[i - 1].id, tokens[i].id);
    for (const auto& t : tokens) EXPECT_TRUE(contents.insert(t.content).second) << "duplicate " << t.content;
  }
  const Tokenizer& v4 = testing::deepseek(DeepseekVersion::kV4);
  const Tokenizer& v41 = testing::deepseek(DeepseekVersion::kV41);
  // model-v4.md §5 / recipe.md §2.1, §7.
  for (const Tokenizer* t : {&v4, &v41}) {
    EXPECT_EQ(t->added_token_id("<｜begin▁of▁sentence｜>"), 0);
    EXPECT_EQ(t->added_token_id("<｜end▁of▁sentence｜>"), 1);
    EXPECT_EQ(t->added_token_id("<｜User｜>"), 128803);
    EXPECT_EQ(t->added_token_id("<｜Assistant｜>"), 128804);
    EXPECT_EQ(t->added_token_id("<think>"), 128821);
    EXPECT_EQ(t->added_token_id("</think>"), 128822);
    EXPECT_EQ(t->added_token_id("｜DSML｜"), 128825);
    EXPECT_EQ(t->added_token_id("<｜latest_reminder｜>"), 128828);
    EXPECT_EQ(t->added_token_id("<｜action｜>"), 128829);
    EXPECT_EQ(t->added_token_id("<｜image｜>"), 129264);
    EXPECT_TRUE(t->is_special(129264));
    EXPECT_FALSE(t->is_special(128821));
    for (int32_t id = 0; id < kDeepseekVocabSize; ++id) ASSERT_TRUE(t->is_known(id)) << id;
  }
  EXPECT_EQ(v41.added_token_id("<｜System｜>"), 128799);
  EXPECT_EQ(v4.added_token_id("<｜System｜>"), std::nullopt);
  EXPECT_EQ(v4.added_token_id("<｜place▁holder▁no▁799｜>"), 128799);
  EXPECT_EQ(v4.added_token_id("<｜image2｜>"), 129279);
  EXPECT_FALSE(v4.is_special(129279));
  EXPECT_TRUE(v41.is_special(129279));
}

TEST(DeepseekV4, BuiltFileKeepsTheBaseAndIsValidJson) {
  const std::string& base_text = testing::v3_base_text();
  ASSERT_FALSE(base_text.empty());
  const auto base = nlohmann::json::parse(base_text);
  const auto built = nlohmann::json::parse(testing::deepseek_json(DeepseekVersion::kV41));
  for (const char* key : {"version", "truncation", "padding", "normalizer", "pre_tokenizer", "post_processor",
                          "decoder", "model"})
    EXPECT_EQ(built[key], base[key]) << key;
  EXPECT_EQ(built["added_tokens"].size(), 1283u);
  EXPECT_EQ(built["added_tokens"][0]["content"], "<｜begin▁of▁sentence｜>");
}

TEST(DeepseekV4, RejectsABaseThatIsNotV3) {
  EXPECT_THROW(build_deepseek_tokenizer_json("{}", DeepseekVersion::kV4, "x.json"), core::Error);
  EXPECT_THROW(build_deepseek_tokenizer_json("not json", DeepseekVersion::kV4, "x.json"), core::Error);
  nlohmann::json small = {{"model", {{"vocab", {{"a", 0}}}, {"merges", nlohmann::json::array()}}},
                          {"added_tokens", nlohmann::json::array()}};
  try {
    build_deepseek_tokenizer_json(small.dump(), DeepseekVersion::kV4, "x.json");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("128000"), std::string::npos) << e.what();
  }
}

TEST(DeepseekV4, ConfigFiles) {
  const auto v4 = nlohmann::json::parse(build_deepseek_tokenizer_config(DeepseekVersion::kV4));
  const auto v41 = nlohmann::json::parse(build_deepseek_tokenizer_config(DeepseekVersion::kV41));
  EXPECT_EQ(v4["tokenizer_class"], "PreTrainedTokenizerFast");
  EXPECT_EQ(v4["add_bos_token"], false);
  EXPECT_EQ(v4["add_eos_token"], false);
  EXPECT_EQ(v4["bos_token"], "<｜begin▁of▁sentence｜>");
  EXPECT_EQ(v4["eos_token"], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(v4["pad_token"], "<｜end▁of▁sentence｜>");
  EXPECT_EQ(v41["pad_token"], "<｜▁pad▁｜>");
  EXPECT_EQ(v4["model_max_length"], 1048576);
  EXPECT_EQ(parse_deepseek_version("v41"), DeepseekVersion::kV41);
  EXPECT_EQ(parse_deepseek_version("v4"), DeepseekVersion::kV4);
  EXPECT_EQ(parse_deepseek_version("v5"), std::nullopt);
}

// scripts/tokenizers.sh installs the files that `dsinfer mkmodel` copies into model folders; if they
// are there, they must be what the builder makes now.
TEST(DeepseekV4, InstalledFilesAreCurrent) {
  for (const DeepseekVersion v : {DeepseekVersion::kV4, DeepseekVersion::kV41}) {
    const std::string dir = deepseek_tokenizer_dir(v);
    const std::string installed = testing::read_file(dir + "/tokenizer.json");
    if (installed.empty()) continue;  // not installed on this machine: nothing to compare
    EXPECT_TRUE(installed == testing::deepseek_json(v))
        << dir << "/tokenizer.json is stale; run scripts/tokenizers.sh";
    EXPECT_EQ(testing::read_file(dir + "/tokenizer_config.json"), build_deepseek_tokenizer_config(v))
        << dir << "/tokenizer_config.json is stale; run scripts/tokenizers.sh";
  }
}

}  // namespace
}  // namespace dsinfer::tokenizer
