#include "tokenizer/deepseek_v4.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cstdio>
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

// The released V4.1 table (deepseek_v41_tokens.cpp): no id of the added range is a made-up placeholder,
// and the spellings and flags are the release's (spot values written out from the public ports).
TEST(DeepseekV41, AddedRangeHasTheReleasedSpellings) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  const std::vector<std::pair<int32_t, std::string>> named = {
      {128799, "<｜System｜>"},
      {128805, "<|EOT|>"},
      {128815, "<｜begin▁of▁repo▁name｜>"},
      {128820, "<｜end▁of▁file｜>"},
      {128823, "<｜place▁holder▁for▁copy｜>"},
      {128824, "<｜place▁holder▁for▁pointer▁replace｜>"},
      {128826, "<｜begin▁sys｜>"},
      {128827, "<｜end▁sys｜>"},
      {128830, "<｜query｜>"},
      {128833, "<｜task｜>"},
      {128837, "<｜safety｜>"},
      {128840, "<dsml:"},
      {128841, "</dsml:"},
      {128842, "<｜search▁begin｜>"},
      {128845, "<｜read_url｜>"},
      {128846, "<｜end_of_query｜>"},
      {128847, "<|place_holder_mm_span_0021|>"},
      {129261, "<|place_holder_mm_span_0435|>"},
      {129262, "<｜rl_image_pad｜>"},
      {129263, "<｜rl_image_start｜>"},
      {129264, "<｜image｜>"},
      {129265, "<|place_holder_mm_span_0436|>"},
      {129270, "<|place_holder_mm_span_0441|>"},
      {129271, "<｜/polygon｜>"},
      {129278, "<｜ref｜>"},
      {129279, "<|place_holder_mm_span_0442|>"},
  };
  for (const auto& [id, content] : named) {
    EXPECT_EQ(t.added_token_id(content), id) << content;
    EXPECT_EQ(t.decode(std::vector<int32_t>{id}), content) << id;
  }
  // Only the 799 V3 reserved tokens (ids 128000-128798) keep a <｜place▁holder▁no▁N｜> spelling.
  int specials = 0;
  for (int32_t id = 128000; id < kDeepseekVocabSize; ++id) {
    const std::string text = t.decode(std::vector<int32_t>{id});
    const bool placeholder = text.rfind("<｜place▁holder▁no▁", 0) == 0;
    EXPECT_EQ(placeholder, id < 128799) << id << " " << text;
    if (placeholder) {
      EXPECT_EQ(text, "<｜place▁holder▁no▁" + std::to_string(id - 128000) + "｜>");
    }
    if (id >= 128847 && id <= 129261) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "<|place_holder_mm_span_%04d|>", id - 128826);
      EXPECT_EQ(text, buf) << id;
    }
    specials += t.is_special(id) ? 1 : 0;
  }
  // special=true: 799 reserved, <|EOT|>, end_of_query, 415 + 1 mm spans, rl_image_pad/start, <｜image｜>,
  // 8 polygon/point/box/ref; everything else (the 46 protocol tokens and spans 0436-0441) is not.
  EXPECT_EQ(specials, 799 + 1 + 1 + 416 + 2 + 1 + 8);
  for (const int32_t id : {128846, 129262, 129263, 129271, 129278, 129279, 128847, 128805})
    EXPECT_TRUE(t.is_special(id)) << id;
  for (const int32_t id : {128799, 128815, 128823, 128826, 128830, 128837, 128840, 128845, 129265})
    EXPECT_FALSE(t.is_special(id)) << id;
}

// Issue 12: decoding V4.1 output must keep what the reference prints; <｜safety｜> is not special.
TEST(DeepseekV41, SafetyTokenDecodesAndSurvivesSkipSpecial) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  const std::vector<int32_t> ids = {128837};
  EXPECT_EQ(t.decode(ids, false), "<｜safety｜>");
  EXPECT_EQ(t.decode(ids, true), "<｜safety｜>");
  EXPECT_FALSE(t.is_special(128837));
  EXPECT_EQ(t.decode(std::vector<int32_t>{128846}, true), "");  // <｜end_of_query｜> is special
}

TEST(DeepseekV41, RoundTripsTextWithTheNewTokens) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  const std::string text =
      "Hello<｜safety｜> world <｜title｜>x<dsml:a></dsml:a><｜search▁begin｜>q<｜search▁end｜>"
      "<｜end_of_query｜><｜box｜>1<｜/box｜><|place_holder_mm_span_0100|>";
  const auto ids = t.encode(text);
  // Each added spelling is one token; the plain text around them is BPE.
  for (const int32_t id : {128837, 128836, 128840, 128841, 128842, 128843, 128846, 129276, 129275, 128926})
    EXPECT_NE(std::find(ids.begin(), ids.end(), id), ids.end()) << id;
  EXPECT_EQ(t.decode(ids, false), text);
  EXPECT_EQ(t.decode(ids, true),
            "Hello<｜safety｜> world <｜title｜>x<dsml:a></dsml:a><｜search▁begin｜>q<｜search▁end｜>1");
  // The chat template's control tokens still resolve to their ids.
  EXPECT_EQ(t.encode("<｜begin▁of▁sentence｜><｜System｜>s<｜User｜>u<｜Assistant｜><think>r</think>"
                     "<｜DSML｜ calls><｜latest_reminder｜><｜action｜><｜end▁of▁sentence｜>"),
            (std::vector<int32_t>{0, 128799, 85, 128803, 87, 128804, 128821, 84, 128822, 30, 128825, 10699, 32,
                                  128828, 128829, 1}));
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
