#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/regex.h"
#include "grammar/test_util.h"
#include "grammar/utf8_ranges.h"

namespace dsinfer::grammar {
namespace {

using testing::matches;

std::shared_ptr<const Grammar> re(const std::string& p) { return std::make_shared<const Grammar>(regex_grammar(p)); }

std::string regex_error(const std::string& p) {
  try {
    regex_grammar(p);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Regex, ClassesQuantifiersGroups) {
  auto g = re(R"g(^[A-Z]{2}-\d{3,4}(?:-[a-f0-9]+)?$)g");
  EXPECT_TRUE(matches(g, "AB-123"));
  EXPECT_TRUE(matches(g, "XY-1234-beef"));
  EXPECT_FALSE(matches(g, "AB-12"));
  EXPECT_FALSE(matches(g, "AB-12345"));
  EXPECT_FALSE(matches(g, "ab-123"));
  EXPECT_FALSE(matches(g, "AB-123-"));
  EXPECT_FALSE(matches(g, "AB-123-BEEF"));
}

TEST(Regex, AlternationAndAnchorsAreWholeMatch) {
  auto g = re("cat|dog(s)?");
  EXPECT_TRUE(matches(g, "cat"));
  EXPECT_TRUE(matches(g, "dogs"));
  EXPECT_FALSE(matches(g, "cats"));
  EXPECT_FALSE(matches(g, "a cat"));
}

TEST(Regex, Escapes) {
  auto g = re(R"g(\w+@\w+\.com\s\S\D\W\x41\u00e9\u{1F600}\.\*\[)g");
  EXPECT_TRUE(matches(g, "a_1@b2.com\txy!Aé😀.*["));
  EXPECT_FALSE(matches(g, "a_1@b2xcom\txy!Aé😀.*["));
  EXPECT_FALSE(matches(g, "a_1@b2.com\tx1!Aé😀.*["));
}

TEST(Regex, DotAndNegatedClasses) {
  auto g = re("[^a-c\\d]..");
  EXPECT_TRUE(matches(g, "zé€"));
  EXPECT_FALSE(matches(g, "a12"));
  EXPECT_FALSE(matches(g, "5xy"));
  EXPECT_FALSE(matches(g, "z\nx"));
  EXPECT_TRUE(matches(re("[^]"), "\n"));
}

TEST(Regex, LazyQuantifierIsTheSameLanguage) {
  auto g = re("a+?b{1,2}?");
  EXPECT_TRUE(matches(g, "aab"));
  EXPECT_TRUE(matches(g, "abb"));
  EXPECT_FALSE(matches(g, "abbb"));
}

TEST(Regex, LiteralBraceWhenNotAQuantifier) {
  auto g = re("a{x}");
  EXPECT_TRUE(matches(g, "a{x}"));
}

TEST(Regex, ErrorsNameTheConstruct) {
  EXPECT_EQ(regex_error("(a"), "regex line 1 column 1: unclosed '('");
  EXPECT_EQ(regex_error("a)"), "regex line 1 column 2: unexpected ')'");
  EXPECT_EQ(regex_error("*a"), "regex line 1 column 1: nothing to repeat before '*'");
  EXPECT_EQ(regex_error("(a)\\1"), "regex line 1 column 4: backreference \\1 is not supported");
  EXPECT_EQ(regex_error("a(?=b)"), "regex line 1 column 2: lookahead is not supported");
  EXPECT_EQ(regex_error("\\bword"), "regex line 1 column 1: word boundary \\b is not supported");
  EXPECT_EQ(regex_error("[b-a]"), "regex line 1 column 1: character range out of order");
  EXPECT_EQ(regex_error("[abc"), "regex line 1 column 1: unterminated character class");
  EXPECT_EQ(regex_error("[a-"), "regex line 1 column 1: unterminated character class");
  EXPECT_EQ(regex_error("a{3,1}"), "regex line 1 column 2: repeat maximum below its minimum");
  EXPECT_EQ(regex_error("a^b"), "regex line 1 column 2: '^' is only supported at the start of the pattern");
  EXPECT_EQ(regex_error("[]"), "regex line 1 column 1: empty character class [] matches nothing");
}

TEST(Utf8Ranges, SequencesByLength) {
  auto two = utf8_sequences(0x80, 0x7FF);
  ASSERT_EQ(two.size(), 1u);
  ASSERT_EQ(two[0].size(), 2u);
  EXPECT_EQ(two[0][0].lo, 0xC2);
  EXPECT_EQ(two[0][0].hi, 0xDF);
  EXPECT_EQ(two[0][1].lo, 0x80);
  EXPECT_EQ(two[0][1].hi, 0xBF);
  // U+0800..U+D7FF: E0 [A0-BF] [80-BF], [E1-EC] [80-BF] [80-BF], ED [80-9F] [80-BF].
  auto three = utf8_sequences(0x800, 0xD7FF);
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0][0].lo, 0xE0);
  EXPECT_EQ(three[0][1].lo, 0xA0);
  EXPECT_EQ(three[1][0].lo, 0xE1);
  EXPECT_EQ(three[1][0].hi, 0xEC);
  EXPECT_EQ(three[2][0].lo, 0xED);
  EXPECT_EQ(three[2][1].hi, 0x9F);
  // A range inside one lead byte: U+00E9..U+00EA is C3 [A9-AA].
  auto small = utf8_sequences(0xE9, 0xEA);
  ASSERT_EQ(small.size(), 1u);
  EXPECT_EQ(small[0][0].lo, 0xC3);
  EXPECT_EQ(small[0][0].hi, 0xC3);
  EXPECT_EQ(small[0][1].lo, 0xA9);
  EXPECT_EQ(small[0][1].hi, 0xAA);
}

TEST(Utf8Ranges, NegationCutsSurrogates) {
  auto r = normalize_code_ranges({{'a', 'z'}}, true);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].lo, 0u);
  EXPECT_EQ(r[0].hi, uint32_t{'a' - 1});
  EXPECT_EQ(r[1].lo, uint32_t{'z' + 1});
  EXPECT_EQ(r[1].hi, 0xD7FFu);
  EXPECT_EQ(r[2].lo, 0xE000u);
  EXPECT_EQ(r[2].hi, 0x10FFFFu);
}

}  // namespace
}  // namespace dsinfer::grammar
