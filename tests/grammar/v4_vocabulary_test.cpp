// The matcher over the real V4 vocabulary (~129K tokens): valid instances, as our tokenizer encodes
// them, are accepted token by token and every token is in the mask of its step (completeness); random
// walks that always pick a masked token end in a sentence of the grammar (soundness of the masks).
#include <gtest/gtest.h>

#include <random>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/test_util.h"
#include "grammar/token_matcher.h"
#include "tokenizer/tokenizer_files.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

using testing::v4;
using testing::v4_vocab;

struct Case {
  const char* schema;
  std::vector<const char*> instances;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> kCases = {
      {R"g({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},
           "email":{"type":"string","format":"email"}},"required":["name","age"]})g",
       {R"g({"name":"Ada Lovelace","age":36})g", R"g({"name":"Zoë \"Z\" Ünal","age":0,"email":"z.u@example.org"})g"}},
      {R"g({"type":"array","items":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},
           "when":{"type":"string","format":"date-time"},"score":{"type":"number"}},"required":["id"]},"maxItems":3})g",
       {"[]", R"g([{"id":"123e4567-e89b-12d3-a456-426614174000","when":"2025-06-30T12:00:00Z","score":-1.25e-3}])g"}},
      {R"g({"$defs":{"t":{"type":"object","properties":{"label":{"enum":["leaf","node"]},
           "children":{"type":"array","items":{"$ref":"#/$defs/t"}}},"required":["label"]}},"$ref":"#/$defs/t"})g",
       {R"g({"label":"node","children":[{"label":"leaf"},{"label":"node","children":[]}]})g"}},
      {R"g({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"},
           "tags":{"type":"array","items":{"type":"string","maxLength":8}},"ok":{"type":["boolean","null"]}}})g",
       {R"g({"code":"ABC-123","tags":["x","日本語"],"ok":null})g", "{}", R"g({"ok":true})g"}},
  };
  return kCases;
}

// Every token of the encoded text is in its step's mask and accepted; end of text at the end.
void expect_accepted(TokenMatcher& m, const std::string& text) {
  std::vector<int32_t> ids = v4().encode_plain(text);
  TokenMask mask((m.vocabulary().size() + 31) / 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    m.fill_mask(mask);
    ASSERT_TRUE(mask_allows(mask, ids[i])) << text << ": token " << i << " '" << v4().token_bytes(ids[i]) << "'";
    ASSERT_TRUE(m.accept_token(ids[i])) << text << ": token " << i;
  }
  m.fill_mask(mask);
  EXPECT_TRUE(mask_allows(mask, 1)) << text;
  EXPECT_TRUE(m.accept_token(1));
}

TEST(V4Vocabulary, ValidInstancesAreAcceptedTokenByToken) {
  for (const Case& c : cases()) {
    auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(c.schema)));
    for (const char* instance : c.instances) {
      TokenMatcher m(g, v4_vocab());
      expect_accepted(m, instance);
    }
  }
}

TEST(V4Vocabulary, RegexAndEbnfInstances) {
  auto re = std::make_shared<const Grammar>(regex_grammar(R"g(\d{3}-\d{4}( ext\. \d+)?)g"));
  for (const char* s : {"555-1234", "555-1234 ext. 99"}) {
    TokenMatcher m(re, v4_vocab());
    expect_accepted(m, s);
  }
  auto eb = std::make_shared<const Grammar>(compile_ebnf(R"g(root ::= "SELECT " col (", " col)* " FROM " [a-z]+
col ::= [a-z_]+)g"));
  TokenMatcher m(eb, v4_vocab());
  expect_accepted(m, "SELECT id, user_name FROM users");
}

TEST(V4Vocabulary, MaskEqualsPerTokenAcceptance) {
  // The walk's cached automaton must allow exactly the tokens a direct acceptance allows, at states
  // inside strings (plain and escaped), numbers, keys and between values.
  auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(cases()[0].schema)));
  TokenMatcher m(g, v4_vocab());
  TokenMask mask((v4_vocab()->size() + 31) / 32);
  const std::vector<int32_t> ids = v4().encode_plain(R"g({"name":"Zoë \"Z\" Ünal","age":0,"email":"z.u@example.org"})g");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % 3 == 0) {
      m.fill_mask(mask);
      for (int32_t id = 0; id < v4_vocab()->size(); ++id) {
        const bool direct = m.accept_token(id);
        if (direct) m.rollback(1);
        ASSERT_EQ(mask_allows(mask, id), direct || (id == 1 && m.is_complete())) << "step " << i << " token " << id;
      }
    }
    ASSERT_TRUE(m.accept_token(ids[i]));
  }
}

TEST(V4Vocabulary, RandomWalksEndInSentences) {
  // A seeded walk picks uniformly among the masked tokens (end of text with a fixed chance once allowed);
  // what it wrote must be a whole sentence of the grammar, checked afresh from the bytes.
  std::mt19937 rng(1234);
  TokenMask mask((v4_vocab()->size() + 31) / 32);
  for (const Case& c : cases()) {
    auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(c.schema)));
    for (int walk = 0; walk < 2; ++walk) {
      TokenMatcher m(g, v4_vocab());
      std::string text;
      for (int step = 0; step < 200 && !m.terminated(); ++step) {
        m.fill_mask(mask);
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < v4_vocab()->size(); ++id) {
          if (mask_allows(mask, id)) allowed.push_back(id);
        }
        ASSERT_FALSE(allowed.empty());
        int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        // Prefer closing once possible, and pick short structural tokens often, so walks finish.
        if (mask_allows(mask, 1) && rng() % 2 == 0) pick = 1;
        ASSERT_TRUE(m.accept_token(pick));
        if (pick != 1) text += v4().token_bytes(pick);
      }
      if (!m.terminated()) continue;  // a walk that ran long proves nothing either way
      EXPECT_TRUE(testing::matches(g, text)) << text;
      EXPECT_TRUE(Json::accept(text)) << text;
    }
  }
}

}  // namespace
}  // namespace dsinfer::grammar
