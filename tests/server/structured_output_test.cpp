// The server's TokenConstraint over a grammar: in thinking mode every token is allowed until </think>
// (the gate), then the grammar's mask; a rollback past the gate closes it again.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/ebnf.h"
#include "server/structured_output.h"
#include "v4_tokenizer.h"

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

std::vector<uint32_t> mask_of(engine::TokenConstraint& c) {
  std::vector<uint32_t> words(static_cast<size_t>((v4().vocab_size() + 31) / 32));
  c.fill_mask(words);
  return words;
}

// A disaggregated router sends a constraint's source() to its workers, which rebuild it: the rebuilt one
// allows exactly the same tokens at every step, the thinking gate included.
TEST(StructuredOutput, AConstraintRebuiltFromItsSourceMatchesTheOriginal) {
  StructuredOutput here(v4(), 1), there(v4(), 1);
  recipe::OutputConstraintRequest req;
  req.kind = recipe::OutputConstraintRequest::Kind::kJsonSchema;
  req.source = R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]})";
  for (bool thinking : {false, true}) {
    SCOPED_TRACE(thinking);
    auto a = here.constraint_for(req, thinking);
    ASSERT_FALSE(a->source().empty());
    auto b = there.constraint_from_source(a->source());
    EXPECT_EQ(b->source(), a->source());
    std::vector<int32_t> text = v4().encode(R"({"n":12)");
    if (thinking) {
      const std::vector<int32_t> reasoning = v4().encode("hmm</think>");
      text.insert(text.begin(), reasoning.begin(), reasoning.end());
    }
    for (int32_t t : text) {
      ASSERT_EQ(mask_of(*b), mask_of(*a));
      ASSERT_TRUE(a->accept(t));
      ASSERT_TRUE(b->accept(t));
    }
    EXPECT_EQ(mask_of(*b), mask_of(*a));
  }
  req.kind = recipe::OutputConstraintRequest::Kind::kRegex;
  req.source = "x[0-9]+";
  auto r = there.constraint_from_source(here.constraint_for(req, false)->source());
  EXPECT_FALSE(r->accept(v4().encode("y").front()));
  EXPECT_TRUE(r->accept(v4().encode("x").front()));
  EXPECT_THROW(there.constraint_from_source("{}"), core::Error);
  EXPECT_THROW(there.constraint_from_source(R"({"kind":"nope","source":"","thinking":false})"), core::Error);
}

}  // namespace
}  // namespace dsinfer::server
