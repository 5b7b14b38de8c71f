#include <gtest/gtest.h>

#include <set>

#include "grammar/ebnf.h"
#include "grammar/grammar_cache.h"
#include "grammar/test_util.h"
#include "grammar/token_matcher.h"

namespace dsinfer::grammar {
namespace {

using testing::ebnf;

// A small vocabulary with shared prefixes, duplicates and multi-byte characters; id 9 is end of text,
// id 10 a special token.
std::shared_ptr<const Vocabulary> toy_vocab() {
  std::vector<std::string> bytes = {"a", "ab", "abc", "b", "bc", "c", "\"", "é", "ab", "", "<x>", "\xc3", "\xa9"};
  return std::make_shared<const Vocabulary>(bytes, std::vector<int32_t>{9}, std::vector<int32_t>{10});
}

std::set<int32_t> allowed(TokenMatcher& m) {
  TokenMask mask((m.vocabulary().size() + 31) / 32);
  m.fill_mask(mask);
  std::set<int32_t> out;
  for (int32_t id = 0; id < m.vocabulary().size(); ++id) {
    if (mask_allows(mask, id)) out.insert(id);
  }
  return out;
}

TEST(TokenMatcher, MaskFollowsTheGrammar) {
  TokenMatcher m(ebnf(R"g(root ::= "ab" "c"? | "b" [a-c]*)g"), toy_vocab());
  EXPECT_EQ(allowed(m), (std::set<int32_t>{0, 1, 2, 3, 4, 8}));
  ASSERT_TRUE(m.accept_token(0));  // "a"
  EXPECT_EQ(allowed(m), (std::set<int32_t>{3, 4}));  // "b", "bc"
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_EQ(allowed(m), (std::set<int32_t>{5, 9}));  // "c" or end of text
  EXPECT_FALSE(m.accept_token(3));
  ASSERT_TRUE(m.accept_token(9));
  EXPECT_TRUE(m.terminated());
  EXPECT_EQ(allowed(m), (std::set<int32_t>{9}));
  EXPECT_FALSE(m.accept_token(5));
  EXPECT_TRUE(m.accept_token(9));  // what the mask offers is accepted
  m.rollback(2);
  EXPECT_FALSE(m.terminated());
  EXPECT_EQ(allowed(m), (std::set<int32_t>{5, 9}));
}

TEST(TokenMatcher, EndOfTextOnlyWhenComplete) {
  TokenMatcher m(ebnf(R"g(root ::= "a" "b")g"), toy_vocab());
  EXPECT_FALSE(m.accept_token(9));
  ASSERT_TRUE(m.accept_token(0));
  EXPECT_FALSE(m.accept_token(9));
  EXPECT_EQ(allowed(m), (std::set<int32_t>{3}));
  ASSERT_TRUE(m.accept_token(3));
  EXPECT_EQ(allowed(m), (std::set<int32_t>{9}));
}

TEST(TokenMatcher, SpecialTokensNeverAllowed) {
  TokenMatcher m(ebnf(R"g(root ::= [^"]*)g"), toy_vocab());
  std::set<int32_t> a = allowed(m);
  EXPECT_EQ(a.count(10), 0u);
  EXPECT_EQ(a.count(6), 0u);  // the quote
  EXPECT_EQ(a.count(9), 1u);  // empty is complete
  EXPECT_FALSE(m.accept_token(10));
}

TEST(TokenMatcher, PartialCharactersAcrossTokens) {
  TokenMatcher m(ebnf(R"g(root ::= "é"+)g"), toy_vocab());
  EXPECT_EQ(allowed(m), (std::set<int32_t>{7, 11}));  // "é" whole or its first byte
  ASSERT_TRUE(m.accept_token(11));
  EXPECT_EQ(allowed(m), (std::set<int32_t>{12}));
  ASSERT_TRUE(m.accept_token(12));
  EXPECT_EQ(allowed(m), (std::set<int32_t>{7, 9, 11}));
}

TEST(TokenMatcher, RollbackUndoesTokensAndEndOfText) {
  TokenMatcher m(ebnf(R"g(root ::= [abc]+)g"), toy_vocab());
  ASSERT_TRUE(m.accept_token(2));  // abc
  ASSERT_TRUE(m.accept_token(4));  // bc
  ASSERT_TRUE(m.accept_token(9));
  EXPECT_EQ(m.tokens_accepted(), 3);
  m.rollback(2);
  EXPECT_FALSE(m.terminated());
  EXPECT_EQ(m.tokens_accepted(), 1);
  ASSERT_TRUE(m.accept_token(5));
  ASSERT_TRUE(m.accept_token(9));
  m.rollback(3);
  EXPECT_EQ(m.tokens_accepted(), 0);
  EXPECT_FALSE(m.accept_token(9));  // empty is not a sentence
}

TEST(TokenMatcher, MaskEqualsPerTokenCheck) {
  // The trie walk must allow exactly the tokens a fresh per-token acceptance allows, at every step of a
  // path through a grammar with recursion.
  auto g = ebnf(R"g(root ::= "(" root ")" root | "a" | "b" "c"*)g");
  std::vector<std::string> bytes;
  for (const char* s : {"(", ")", "a", "b", "c", "((", "))", "()", "(a", "a)", "bc", "ccc", ")(", "x"}) bytes.push_back(s);
  bytes.push_back("");
  auto vocab = std::make_shared<const Vocabulary>(bytes, std::vector<int32_t>{14});
  TokenMatcher m(g, vocab);
  for (int32_t step : {5, 2, 1, 3, 11, 1, 2}) {
    std::set<int32_t> expect;
    for (int32_t id = 0; id < vocab->size(); ++id) {
      if (m.accept_token(id)) {
        expect.insert(id);
        m.rollback(1);
      }
    }
    if (m.is_complete()) expect.insert(14);
    EXPECT_EQ(allowed(m), expect);
    ASSERT_TRUE(m.accept_token(step)) << step;
  }
  EXPECT_TRUE(m.is_complete());
}

TEST(GrammarCache, CompilesOnceAndEvictsLeastRecent) {
  GrammarCache cache(2);
  int compiles = 0;
  auto compile = [&](const std::string& text) {
    return [&compiles, text] {
      ++compiles;
      return compile_ebnf(text);
    };
  };
  auto a1 = cache.get("ebnf:a", compile("root ::= \"a\""));
  auto a2 = cache.get("ebnf:a", compile("root ::= \"a\""));
  EXPECT_EQ(a1.get(), a2.get());
  EXPECT_EQ(compiles, 1);
  cache.get("ebnf:b", compile("root ::= \"b\""));
  cache.get("ebnf:a", compile("root ::= \"a\""));  // a is now the most recent
  cache.get("ebnf:c", compile("root ::= \"c\""));  // evicts b
  EXPECT_EQ(compiles, 3);
  cache.get("ebnf:a", compile("root ::= \"a\""));
  EXPECT_EQ(compiles, 3);
  cache.get("ebnf:b", compile("root ::= \"b\""));
  EXPECT_EQ(compiles, 4);
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace dsinfer::grammar

namespace dsinfer::grammar {
namespace {

TEST(TokenMatcher, CachedMasksSurviveRollbackAndRepeatStates) {
  // Random accepts and rollbacks; after each, the mask must equal a fresh matcher's mask for the same
  // tokens (the walk results cached by state must never outlive the input they describe).
  auto g = ebnf(R"g(root ::= "[" (item ("," item)*)? "]"
item ::= "a"+ | "b" "c"* | "[" root? "]")g");
  std::vector<std::string> bytes;
  for (const char* s : {"[", "]", ",", "a", "aa", "b", "c", "cc", "[a", "a]", "],", ",[", "[]", "bc"}) bytes.push_back(s);
  bytes.push_back("");
  auto vocab = std::make_shared<const Vocabulary>(bytes, std::vector<int32_t>{14});
  TokenMatcher m(g, vocab);
  std::vector<int32_t> history;
  uint32_t seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff; };
  for (int step = 0; step < 300; ++step) {
    std::set<int32_t> mask = allowed(m);
    TokenMatcher fresh(g, vocab);
    for (int32_t t : history) ASSERT_TRUE(fresh.accept_token(t));
    ASSERT_EQ(mask, allowed(fresh)) << "step " << step;
    if (!history.empty() && next() % 4 == 0) {
      int32_t n = 1 + static_cast<int32_t>(next() % history.size());
      m.rollback(n);
      history.resize(history.size() - n);
      continue;
    }
    std::vector<int32_t> choices(mask.begin(), mask.end());
    int32_t t = choices[next() % choices.size()];
    if (t == 14) continue;  // keep going instead of ending
    ASSERT_TRUE(m.accept_token(t));
    history.push_back(t);
  }
}

}  // namespace
}  // namespace dsinfer::grammar
