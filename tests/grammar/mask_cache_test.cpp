// The per-grammar token-mask cache (src/grammar/mask_cache.*): over JSON schemas, regexes, EBNF and
// strict tool calls on the real V4 vocabulary, a matcher using the cache gives bit for bit the mask of
// the full trie walk at every step of seeded random walks with rollbacks; a second request of the same
// grammar walks nothing new; concurrent requests share one cache. (grammar_completeness does the same
// comparison over tests/grammar/schema_corpus.mjs and the completeness corpus.)
#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/mask_cache.h"
#include "grammar/mask_compare.h"
#include "grammar/regex.h"
#include "grammar/test_util.h"
#include "grammar/tool_calls.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::compare_mask_walks;
using testing::v4;
using testing::v4_vocab;

const char* const kSchemas[] = {
    R"g({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0},
        "email":{"type":"string","format":"email"}},"required":["name","age"]})g",
    R"g({"type":"object"})g",
    R"g({"$defs":{"t":{"type":"object","properties":{"label":{"type":"string"},"children":{"type":"array",
        "items":{"$ref":"#/$defs/t"}}},"required":["label"]}},"$ref":"#/$defs/t"})g",
    R"g({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},
        "kind":{"enum":["created","updated","deleted"]},"payload":{"type":"object","additionalProperties":
        {"type":["string","number","boolean","null"]}},"tags":{"type":"array","items":{"type":"string","maxLength":16},
        "maxItems":8}},"required":["id","at","kind"]})g",
    R"g({"type":"object","properties":{"kind":{"enum":["a","b","c"]},"n":{"type":"integer","minimum":-5,"maximum":40},
        "ok":{"type":"boolean"},"tag":{"type":"string","maxLength":4}},"required":["kind","n"]})g",
    R"g({"anyOf":[{"type":"null"},{"const":{"fixed":[1,2]}},{"type":"array","minItems":1,"maxItems":2,
        "prefixItems":[{"type":"boolean"}],"items":{"enum":[0,1]}}]})g",
    R"g({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{2,4}$"},
        "score":{"type":"number"},"ok":{"type":["boolean","null"]}}})g",
};

TEST(MaskCache, JsonSchemaWalksMatchTheFullWalk) {
  uint32_t seed = 1;
  for (const char* schema : kSchemas) {
    auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(schema)));
    int steps = 0;
    EXPECT_EQ(compare_mask_walks(g, v4_vocab(), seed++, 4, 80, &steps), "") << schema;
    EXPECT_GT(steps, 40) << schema;
  }
}

TEST(MaskCache, AnyWhitespaceRegexAndEbnfWalksMatchTheFullWalk) {
  JsonSchemaOptions ws;
  ws.any_whitespace = true;
  std::vector<std::shared_ptr<const Grammar>> grammars = {
      std::make_shared<const Grammar>(json_schema_grammar(Json::parse(kSchemas[0]), ws)),
      std::make_shared<const Grammar>(regex_grammar(R"g(\d{3}-\d{4}( ext\. \d+)?)g")),
      std::make_shared<const Grammar>(regex_grammar(R"g(([a-z]+\.)*[a-z]{2,8}@[a-z]+\.(com|org))g")),
      testing::ebnf(R"g(root ::= "SELECT " col (", " col)* " FROM " [a-z]+
col ::= [a-z_]+)g"),
      testing::ebnf(R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= num | "(" expr ")"
num ::= [0-9]+)g"),
  };
  uint32_t seed = 100;
  for (const auto& g : grammars) {
    int steps = 0;
    EXPECT_EQ(compare_mask_walks(g, v4_vocab(), seed++, 4, 60, &steps), "") << to_string(*g);
    EXPECT_GT(steps, 20);
  }
}

TEST(MaskCache, StrictToolCallWalksMatchTheFullWalk) {
  // Tool choice auto (text without a marker first) and required (the block's calls) over the
  // vocabulary that keeps the marker.
  auto vocab = Vocabulary::from_tokenizer(v4(), {1}, {kDsmlMarker, kThinkEndText});
  const std::vector<ToolSpec> tools = {
      {"get_weather", Json::parse(R"j({"type":"object","properties":{"city":{"type":"string"},
         "days":{"type":"integer","minimum":1,"maximum":14},"unit":{"enum":["C","F"]}},"required":["city"]})j")},
      {"ping", Json::parse(R"j({"type":"object","properties":{},"additionalProperties":false})j")}};
  for (bool inside_block : {false, true}) {
    ToolCallGrammarOptions o;
    o.tags = {"tool_calls", "invoke", "parameter"};
    o.inside_block = inside_block;
    auto g = std::make_shared<const Grammar>(tool_call_grammar(tools, o));
    int steps = 0;
    EXPECT_EQ(compare_mask_walks(g, vocab, 7, 3, 100, &steps, 50), "") << inside_block;
    EXPECT_GT(steps, 100) << inside_block;
  }
}

TEST(MaskCache, StateStepsOverRightRecursionAndNullablesMatchTheFullWalk) {
  // An item's walk steps from interned states, not from a real matcher: completions into a state read
  // its items waiting for a nonterminal (a bounded string's right-recursive chain completes into every
  // set of the chain at each byte), items that started at the walk's first state name the real set
  // there. Grammars that exercise exactly that (bounded repeats, nullable rules completing where they
  // were predicted, nesting that completes through several states) over a small vocabulary with
  // multi-byte UTF-8 (and a character split across tokens), tokens whose prefix is a token, duplicate
  // spellings, and long tokens that cross several repeats and the string's end: every step's mask is the
  // full walk's, over many seeded random walks with rollbacks.
  const std::vector<std::string> spellings = {  // [0]: end of text
      "", "\"", "\\", ",", ":", "{", "}", "[", "]", "(", ")", "a", "ab", "abc", "abcd", "abcdefgh", "b", "ba",
      "\u00e9", "\xc3", "\xa9", "\xc3\xa9", "\xe2\x82\xac", "\xe2\x82", "\xac\"", "\xf0\x9f\x98\x80", "a\"", "ab\",",
      "abcdef\"}", "\\\"", "\\n", "x", "xx", "xxxx", "xxxxxxxx", "0", "1", "12", "-", "true", "null", " ", "  ",
      "a", "ab", "\"a", "\"ab\"", "\":", "\",\"", "\"}", "é", "éé", "aé", "x)", "(x", "((", "))", ")}", "])"};
  std::vector<std::string> tokens = spellings;
  for (int b = 1; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));  // any text can go on
  auto vocab = std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{0});
  std::vector<std::shared_ptr<const Grammar>> grammars = {
      std::make_shared<const Grammar>(json_schema_grammar(Json::parse(
          R"g({"type":"object","properties":{"s":{"type":"string","maxLength":9},"t":{"type":"array",
              "items":{"type":"string","minLength":1,"maxLength":3},"maxItems":3},"n":{"type":"integer"}},
              "required":["s"]})g"))),
      testing::ebnf(R"g(root ::= "[" item ("," item)* "]"
item ::= [a-zé]{0,5} | "(" item ")" | opt opt "x"{2,6}
opt ::= "" | "b")g"),
      std::make_shared<const Grammar>(regex_grammar(R"g((a|ab|é){0,7}(x{1,4}|\(x*\))?)g")),
  };
  uint32_t seed = 900;
  for (const auto& g : grammars) {
    int steps = 0;
    EXPECT_EQ(compare_mask_walks(g, vocab, seed++, 30, 40, &steps), "") << to_string(*g);
    EXPECT_GT(steps, 100) << to_string(*g);
    EXPECT_GT(g->mask_cache->stats().walks, 10u) << to_string(*g);
  }
}

TEST(MaskCache, ASecondRequestWalksNothingNew) {
  // The entries belong to the compiled grammar: a second matcher along the same tokens hits them all.
  auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(kSchemas[0])));
  const std::vector<int32_t> ids = v4().encode_plain(R"g({"name":"Ada Lovelace","age":36,"email":"ada@x.org"})g");
  TokenMask mask((v4_vocab()->size() + 31) / 32);
  auto run = [&] {
    TokenMatcher m(g, v4_vocab());
    for (int32_t id : ids) {
      m.fill_mask(mask);
      ASSERT_TRUE(mask_allows(mask, id));
      ASSERT_TRUE(m.accept_token(id));
    }
  };
  run();
  const MaskCache::Stats first = g->mask_cache->stats();
  EXPECT_GT(first.walks, 0u);
  EXPECT_GT(first.entries, 0u);
  EXPECT_LE(first.bytes, MaskCache::kMaxBytesPerVocabulary);
  run();
  const MaskCache::Stats second = g->mask_cache->stats();
  EXPECT_EQ(second.walks, first.walks);
  EXPECT_GT(second.hits, first.hits);
}

TEST(MaskCache, ConcurrentRequestsShareTheCache) {
  // Several threads walk one grammar at once (the mask thread serves several requests); each compares
  // with the full walk. Under TSan this is the race check of the shared entries.
  auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(kSchemas[3])));
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < errors.size(); ++t) {
    threads.emplace_back([&, t] { errors[t] = compare_mask_walks(g, v4_vocab(), 500 + static_cast<uint32_t>(t), 2, 40); });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(MaskCache, ThreadsMeetingANewItemAtOnceWalkItOnce) {
  // Four requests of one schema (a fresh grammar) start together and write the same text, as 16
  // streams of one schema reach a new string together: each entry is walked by one thread, the
  // others wait for its result (before, each walked it: the string's walk takes the whole vocabulary).
  auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(kSchemas[0])));
  const std::vector<int32_t> ids = v4().encode_plain(R"g({"name":"Ada Lovelace","age":36})g");
  auto vocab = v4_vocab();
  std::latch start(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < errors.size(); ++t) {
    threads.emplace_back([&, t] {
      TokenMatcher m(g, vocab);
      TokenMask mask((vocab->size() + 31) / 32);
      start.arrive_and_wait();
      for (int32_t id : ids) {
        m.fill_mask(mask);
        if (!mask_allows(mask, id) || !m.accept_token(id)) {
          errors[t] = "token " + std::to_string(id) + " refused";
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  const MaskCache::Stats s = g->mask_cache->stats();
  EXPECT_GT(s.entries, 3u);
  EXPECT_EQ(s.walks, s.entries);
}

}  // namespace
}  // namespace dsinfer::grammar
