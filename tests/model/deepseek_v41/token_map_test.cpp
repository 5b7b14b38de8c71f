// The Engram compressed-token map derived from tokenizer.json (model-v41.md §5): the normaliser against
// the spec's known answers and Hugging Face's behaviour (checked with npm `tokenizers`), the count of
// the V4.1 tokenizer, and which source load_engram_token_map takes.
#include "model/deepseek_v41/token_map.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "model/deepseek_v41/engram_normalize.h"
#include "model/test_util.h"
#include "tokenizer/deepseek_v4.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using model::testing::TempDir;

TEST(EngramNormalize, SpecKnownAnswers) {
  for (const char* s : {" The", "the", "THE"}) EXPECT_EQ(engram_normalize(s), "the") << s;
  EXPECT_EQ(engram_normalize(" "), " ");
  EXPECT_EQ(engram_normalize("  x\t\ny "), "x y");
  EXPECT_EQ(engram_normalize("Café"), "cafe");
  EXPECT_EQ(engram_normalize("ﬁ"), "fi");
  EXPECT_EQ(engram_normalize("<｜User｜>"), "<|user|>");
  EXPECT_EQ(engram_normalize(""), "");
}

// Where HF's implementation is more precise than the spec's wording (values from npm tokenizers 0.23.2).
TEST(EngramNormalize, FollowsHuggingFaceWhereTheSpecIsLoose) {
  EXPECT_EQ(engram_normalize("ा"), "");          // U+093E is Mc: StripAccents drops every mark, not only Mn
  EXPECT_EQ(engram_normalize("ΟΔΟΣ"), "οδοσ");   // per-character lowercase: no final sigma
  EXPECT_EQ(engram_normalize("İ"), "i");         // NFD splits off U+0307, which is dropped
  EXPECT_EQ(engram_normalize("\xC2\xA0" "A\xE3\x80\x80"), "a");  // NBSP / U+3000 become spaces (NFKC), stripped
  EXPECT_EQ(engram_normalize(" \t"), " ");       // collapses to one space, which survives
  EXPECT_EQ(engram_normalize("\xEE\x80\x80"), " ");  // U+E000 in the text also ends up a space
}

tokenizer::Tokenizer v41_tokenizer(std::string* json = nullptr) {
  const std::string base_path = std::string(DSINFER_SOURCE_DIR) + "/" + tokenizer::kNpmV3BasePath;
  const std::string base = model::testing::read_bytes(base_path);
  if (base.empty()) core::fail("missing ", base_path, " (scripts/setup.sh installs it)");
  std::string text = tokenizer::build_deepseek_tokenizer_json(base, tokenizer::DeepseekVersion::kV41, base_path);
  tokenizer::Tokenizer t = tokenizer::Tokenizer::from_json_text(text, "v41 tokenizer.json");
  if (json) *json = std::move(text);
  return t;
}

// The released V4.1 table gives exactly engram_compressed_vocab_size (§5: 99 092); pad = map[2] = 2.
TEST(EngramTokenMapDerived, V41TokenizerGivesTheReleasedCount) {
  const EngramTokenMap m = derive_engram_token_map(v41_tokenizer());
  EXPECT_EQ(m.compressed_vocab, 99092);
  ASSERT_EQ(m.map.size(), 129280u);
  EXPECT_EQ(std::vector<int64_t>(m.map.begin(), m.map.begin() + 4), (std::vector<int64_t>{0, 1, 2, 3}));
  // The ids are numbered in order of first appearance: the sidecar parser accepts the map as it is.
  ModelConfig c;
  c.vocab_size = 129280;
  EngramConfig e;
  e.compressed_vocab_size = 99092;
  e.pad_token_id = 2;
  c.engram = e;
  EXPECT_EQ(parse_engram_token_map(engram_token_map_json(m), "derived", c).map, m.map);
}

TEST(EngramTokenMapDerived, LoadPrefersTheSidecarThenTokenizerJson) {
  TempDir dir;
  std::string json;
  v41_tokenizer(&json);
  model::testing::write_bytes(dir.file("tokenizer.json"), json);
  ModelConfig c;
  c.vocab_size = 129280;
  EngramConfig e;
  e.compressed_vocab_size = 99092;
  e.pad_token_id = 2;
  c.engram = e;
  EXPECT_EQ(load_engram_token_map(dir.path(), c).compressed_vocab, 99092);
  // A count the config does not declare is refused, naming both numbers.
  c.engram->compressed_vocab_size = 99091;
  try {
    load_engram_token_map(dir.path(), c);
    ADD_FAILURE() << "no error";
  } catch (const core::Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("99092 distinct ids"), std::string::npos) << what;
    EXPECT_NE(what.find("99091"), std::string::npos) << what;
  }
  // The sidecar of a synthetic checkpoint wins over tokenizer.json.
  c.engram->compressed_vocab_size = 3;
  model::testing::write_bytes(dir.file("engram_token_map.json"), R"({"compressed_vocab_size": 3, "token_map": [0, 1, 2, 1]})");
  const EngramTokenMap s = load_engram_token_map(dir.path(), c);
  EXPECT_EQ(s.map, (std::vector<int64_t>{0, 1, 2, 1}));
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
