#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/ebnf.h"
#include "grammar/test_util.h"

namespace dsinfer::grammar {
namespace {

using testing::ebnf;

using testing::is_prefix;
using testing::matches;

std::string ebnf_error(const std::string& text) {
  try {
    compile_ebnf(text);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Ebnf, LiteralsAlternativesAndRepeats) {
  auto g = ebnf(R"g(root ::= "yes" | "no" | "n" [0-9]+ ("," [0-9]+)*)g");
  EXPECT_TRUE(matches(g, "yes"));
  EXPECT_TRUE(matches(g, "no"));
  EXPECT_TRUE(matches(g, "n1"));
  EXPECT_TRUE(matches(g, "n12,3,456"));
  EXPECT_FALSE(matches(g, "n"));
  EXPECT_FALSE(matches(g, "n1,"));
  EXPECT_FALSE(matches(g, "ye"));
  EXPECT_FALSE(matches(g, "yess"));
  EXPECT_TRUE(is_prefix(g, "n1,"));
  EXPECT_FALSE(is_prefix(g, "x"));
}

TEST(Ebnf, MultiLineRulesCommentsAndRecursion) {
  auto g = ebnf(R"g(# balanced parentheses with a count
root ::= expr
expr ::= "(" expr ")" expr
       | ""   # empty
)g");
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "()"));
  EXPECT_TRUE(matches(g, "(()())()"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_FALSE(matches(g, "())"));
  EXPECT_TRUE(is_prefix(g, "(((("));
}

TEST(Ebnf, LeftRecursionAndNullableRules) {
  auto g = ebnf(R"g(
root ::= list
list ::= list "," item | item
item ::= opt "x"
opt ::= "-"?
)g");
  EXPECT_TRUE(matches(g, "x"));
  EXPECT_TRUE(matches(g, "x,-x,x"));
  EXPECT_FALSE(matches(g, "x,"));
  EXPECT_FALSE(matches(g, "--x"));
}

TEST(Ebnf, BoundedRepeats) {
  auto g = ebnf(R"g(root ::= [a]{2,4} "|" [b]{3} "|" [c]{1,})g");
  EXPECT_TRUE(matches(g, "aa|bbb|c"));
  EXPECT_TRUE(matches(g, "aaaa|bbb|ccc"));
  EXPECT_FALSE(matches(g, "a|bbb|c"));
  EXPECT_FALSE(matches(g, "aaaaa|bbb|c"));
  EXPECT_FALSE(matches(g, "aa|bb|c"));
  EXPECT_FALSE(matches(g, "aa|bbbb|c"));
  EXPECT_FALSE(matches(g, "aa|bbb|"));
}

TEST(Ebnf, ClassesEscapesAndUnicode) {
  auto g = ebnf(R"g(root ::= [^"\\\n]* "\"" [α-ω] "\u00e9" . "\n")g");
  EXPECT_TRUE(matches(g, "ab c\"λé€\n"));
  EXPECT_TRUE(matches(g, "\"αé😀\n"));
  EXPECT_FALSE(matches(g, "a\\\"αéx\n"));   // backslash excluded by the class
  EXPECT_FALSE(matches(g, "\"aéx\n"));      // a is not Greek
  EXPECT_FALSE(matches(g, "\"α\xc3\xa9\xed\xa0\x80\n"));  // a surrogate is not a character
  EXPECT_FALSE(matches(g, "\"α\xc3\xa9\xc3\n"));  // a truncated character is not one
}

TEST(Ebnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(ebnf_error("root ::= \"a\"\nfoo ::= [ab\n"), "ebnf line 2 column 9: unterminated character class");
  EXPECT_EQ(ebnf_error("root ::= \"a"), "ebnf line 1 column 10: unterminated string literal");
  EXPECT_EQ(ebnf_error("root ::= [a-"), "ebnf line 1 column 10: unterminated character class");
  EXPECT_EQ(ebnf_error("root ::= (\"a\" | \"b\""), "ebnf line 1 column 10: unclosed '('");
  EXPECT_EQ(ebnf_error("root = \"a\""), "ebnf line 1 column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(ebnf_error("root ::= \"a\" @"), "ebnf line 1 column 14: unexpected '@'");
  EXPECT_EQ(ebnf_error("root ::= [z-a]"), "ebnf line 1 column 10: character range out of order");
  EXPECT_EQ(ebnf_error("root ::= \"\\q\""), "ebnf line 1 column 11: unknown escape \\q");
  EXPECT_EQ(ebnf_error("root ::= item"), "ebnf: rule 'root' refers to undefined rule 'item'");
  EXPECT_EQ(ebnf_error("start ::= \"a\""), "ebnf: the grammar has no start rule 'root'");
  EXPECT_EQ(ebnf_error("root ::= \"a\" root"),
            "ebnf: rule 'root' can never finish (every alternative recurses without a way out)");
  EXPECT_EQ(ebnf_error("root ::= \"a\"\nroot ::= \"b\""), "ebnf line 2 column 1: rule 'root' is defined twice");
  EXPECT_EQ(ebnf_error("root ::= \"a\"{3,2}"), "ebnf line 1 column 13: repeat maximum below its minimum");
  EXPECT_EQ(ebnf_error(""), "ebnf line 1 column 1: the grammar has no rules");
}

TEST(Ebnf, RollbackRestoresTheState) {
  auto g = ebnf(R"g(root ::= "ab" "c"* "d")g");
  EarleyMatcher m(g);
  ASSERT_TRUE(m.accept_bytes("abccc"));
  EXPECT_FALSE(m.is_complete());
  ASSERT_TRUE(m.accept_byte('d'));
  EXPECT_TRUE(m.is_complete());
  EXPECT_FALSE(m.accept_byte('c'));
  m.rollback(5);  // back to "a"
  EXPECT_EQ(m.bytes_accepted(), 1u);
  EXPECT_FALSE(m.accept_byte('c'));
  ASSERT_TRUE(m.accept_bytes("bd"));
  EXPECT_TRUE(m.is_complete());
  m.reset();
  EXPECT_FALSE(m.accept_byte('b'));
  ASSERT_TRUE(m.accept_bytes("abd"));
  EXPECT_TRUE(m.is_complete());
}

TEST(Ebnf, AllowedBytes) {
  auto g = ebnf(R"g(root ::= "a" ([0-2] | "x"))g");
  EarleyMatcher m(g);
  ASSERT_TRUE(m.accept_byte('a'));
  ByteSet s = m.allowed_bytes();
  for (int b = 0; b < 256; ++b) {
    bool expected = b == '0' || b == '1' || b == '2' || b == 'x';
    EXPECT_EQ(s.has(static_cast<uint8_t>(b)), expected) << b;
  }
}

}  // namespace
}  // namespace dsinfer::grammar
