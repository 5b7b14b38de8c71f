// The server's TokenConstraint over a grammar: in thinking mode every token is allowed until </think>
// (the gate), then the grammar's mask; a rollback past the gate closes it again.
#include <gtest/gtest.h>

#include <set>

#include "grammar/ebnf.h"
#include "server/structured_output.h"

namespace dsinfer::server {
namespace {

// Tokens: 0 "a", 1 "b", 2 "<gate>" (special, never in a grammar), 3 end of text.
std::shared_ptr<const grammar::Vocabulary> vocab() {
  return std::make_shared<const grammar::Vocabulary>(std::vector<std::string>{"a", "b", "<gate>", ""},
                                                     std::vector<int32_t>{3}, std::vector<int32_t>{2});
}

std::set<int32_t> allowed(GrammarConstraint& c) {
  std::vector<uint32_t> words(1);
  c.fill_mask(words);
  std::set<int32_t> out;
  for (int32_t t = 0; t < 4; ++t) {
    if ((words[0] >> t) & 1) out.insert(t);
  }
  return out;
}

TEST(GrammarConstraint, GateThenGrammarAndRollbackAcrossTheGate) {
  auto g = std::make_shared<const grammar::Grammar>(grammar::compile_ebnf("root ::= \"a\" \"b\""));
  GrammarConstraint c(g, vocab(), 2);
  EXPECT_EQ(allowed(c), (std::set<int32_t>{0, 1, 2, 3}));  // reasoning: anything
  EXPECT_TRUE(c.accept(1));
  EXPECT_TRUE(c.accept(1));
  EXPECT_TRUE(c.accept(2));  // </think>
  EXPECT_EQ(allowed(c), (std::set<int32_t>{0}));
  EXPECT_FALSE(c.accept(1));
  EXPECT_TRUE(c.accept(0));
  EXPECT_EQ(allowed(c), (std::set<int32_t>{1}));
  c.rollback(2);  // "a" and the gate
  EXPECT_EQ(allowed(c), (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_TRUE(c.accept(2));
  EXPECT_TRUE(c.accept(0));
  EXPECT_TRUE(c.accept(1));
  EXPECT_EQ(allowed(c), (std::set<int32_t>{3}));
  EXPECT_TRUE(c.accept(3));
}

TEST(GrammarConstraint, WithoutAGateTheGrammarStartsAtOnce) {
  auto g = std::make_shared<const grammar::Grammar>(grammar::compile_ebnf("root ::= \"b\"+"));
  GrammarConstraint c(g, vocab());
  EXPECT_EQ(allowed(c), (std::set<int32_t>{1}));
  EXPECT_FALSE(c.accept(2));
  EXPECT_TRUE(c.accept(1));
  EXPECT_EQ(allowed(c), (std::set<int32_t>{1, 3}));
}

}  // namespace
}  // namespace dsinfer::server
