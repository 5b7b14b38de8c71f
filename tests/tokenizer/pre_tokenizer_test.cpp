#include "tokenizer/pre_tokenizer.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/regex.h"

namespace dsinfer::tokenizer {
namespace {

using nlohmann::json;

std::vector<std::string> words(const PreTokenizer& pt, std::string_view text) {
  std::vector<std::string> out;
  pt.split(text, [&](std::string_view w) { out.emplace_back(w); });
  return out;
}

PreTokenizer split_then_byte_level(const std::string& regex, const std::string& behavior, bool invert = false) {
  json spec = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", behavior}, {"invert", invert}},
                 {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  return PreTokenizer::from_json(spec, "test");
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, SplitBehavioursFoldLikeHuggingFace) {
  // Worked through Hugging Face's NormalizedString::split by hand for "a-b--c" split on "-".
  EXPECT_EQ(words(split_then_byte_level("-", "Isolated"), "a-b--c"), (Pieces{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(words(split_then_byte_level("-", "Removed"), "a-b--c"), (Pieces{"a", "b", "c"}));
  EXPECT_EQ(words(split_then_byte_level("-", "MergedWithPrevious"), "a-b--c"), (Pieces{"a-", "b-", "-", "c"}));
  EXPECT_EQ(words(split_then_byte_level("-", "MergedWithNext"), "a-b--c"), (Pieces{"a", "-b", "-", "-c"}));
  EXPECT_EQ(words(split_then_byte_level("-", "Contiguous"), "a-b--c"), (Pieces{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(words(split_then_byte_level("-", "Removed", true), "a-b--c"), (Pieces{"-", "-", "-"}));
  EXPECT_EQ(words(split_then_byte_level("-", "MergedWithPrevious"), "-a"), (Pieces{"-", "a"}));
}

TEST(PreTokenizer, StringPatternsAreLiteral) {
  json spec = {{"type", "Sequence"},
               {"pretokenizers",
                {{{"type", "Split"}, {"pattern", {{"String", ".*"}}}, {"behavior", "Isolated"}},
                 {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  EXPECT_EQ(words(PreTokenizer::from_json(spec, "test"), "a.*b.c"), (Pieces{"a", ".*", "b.c"}));
}

TEST(PreTokenizer, ByteLevelUseRegexSplitsLikeGpt2) {
  json spec = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(words(PreTokenizer::from_json(spec, "test"), "Hello world's  end!!"),
            (Pieces{"Hello", " world", "'s", " ", " end", "!!"}));
}

TEST(PreTokenizer, EmptyMatchesFollowOnigFindIter) {
  // x* matches empty everywhere: find_iter yields the empty matches, which become no words.
  EXPECT_EQ(words(split_then_byte_level("x*", "Isolated"), "axxb"), (Pieces{"a", "xx", "b"}));
}

TEST(PreTokenizer, RejectsWhatItCannotDo) {
  EXPECT_THROW(PreTokenizer::from_json(json{{"type", "Whitespace"}}, "f.json"), core::Error);
  EXPECT_THROW(PreTokenizer::from_json(json{{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}},
                                       "f.json"),
               core::Error);  // no ByteLevel
  EXPECT_THROW(PreTokenizer::from_json(json{{"type", "ByteLevel"}, {"add_prefix_space", true}}, "f.json"), core::Error);
  try {
    split_then_byte_level("(", "Isolated");
    FAIL() << "bad regex accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("test"), std::string::npos) << e.what();
  }
}

TEST(Regex, OnigurumaWhitespaceAndWordClasses) {
  const Regex space(translate_oniguruma("\\s+"), "t");
  size_t b = 0, e = 0;
  ASSERT_TRUE(space.find("\xE3\x80\x80", 0, b, e));  // U+3000 ideographic space
  EXPECT_EQ(e - b, 3u);
  ASSERT_TRUE(space.find("\xC2\x85", 0, b, e));  // U+0085 NEL
  EXPECT_FALSE(space.find("\xE1\xA0\x8E", 0, b, e));  // U+180E is not White_Space (PCRE2's \s says yes)
  const Regex not_space(translate_oniguruma("\\S"), "t");
  ASSERT_TRUE(not_space.find("\xE1\xA0\x8E", 0, b, e));
  const Regex word(translate_oniguruma("^\\w+$"), "t");
  EXPECT_TRUE(word.find("a\xCC\x81_9", 0, b, e));      // letter, combining mark, connector, digit
  EXPECT_FALSE(word.find("\xC2\xBD", 0, b, e));         // ½ is No, not Nd
  const Regex hex(translate_oniguruma("^\\h+$"), "t");
  EXPECT_TRUE(hex.find("09afAF", 0, b, e));
  EXPECT_FALSE(hex.find(" ", 0, b, e));
  const Regex u(translate_oniguruma("\\u4e2d"), "t");
  EXPECT_TRUE(u.find("\xE4\xB8\xAD", 0, b, e));
  const Regex cls(translate_oniguruma("[\\s\\w]+"), "t");
  ASSERT_TRUE(cls.find("a b", 0, b, e));
  EXPECT_EQ(e - b, 3u);
}

}  // namespace
}  // namespace dsinfer::tokenizer
