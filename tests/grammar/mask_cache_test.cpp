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
  EXPECT_EQ(s.walks + s.shared, s.entries);
}

// Walk sharing in bounded repeats (README "Walk sharing in bounded repeats"): a chain position's entry
// may be another position's walk. The checks below compare with walks that share nothing.

// A small vocabulary whose tokens are up to 8 characters but for two of 20 and 24 (so chains longer
// than 26 share walks, and positions from 15 up derive theirs: MaskCache::kMinMarkDepth), with long
// tokens of string characters, multi-byte UTF-8 (also split across tokens), and tokens that cross a
// string's or a repeat's end into what follows it (where a wrong rename or depth shows first).
std::shared_ptr<const Vocabulary> chain_vocab() {
  static auto vocab = [] {
    std::vector<std::string> tokens = {  // [0]: end of text
        "", "a", "ab", "abc", "abcd", "abcdefgh", "aaaaaaaa", "aaaaaaaaaaaaaaaaaaaa", "xxxxxxxxxxxxxxxxxxxxxxxx", "b", "ba", "x", "xx", "xxxx", "xxxxxxxx", "1", "12",
        "123", "A", "AB", "-", "-1", "\\", "\\n", "\\\"", "\\u00e9", "\u00e9", "\u00e9\u00e9", "\u20ac",
        "\xe2\x82", "\xac", "\xf0\x9f\x98\x80", "a\u00e9", "\"", "a\"", "ab\"", "ab\",", "abc\"}", "\u00e9\"",
        "\"}", "\",", "\",\"", "a]", "ab]", "\u00e9]", "a>", "ab>", "]", ">", "a)", ")", "(a", "x-", "A-1", "Z-12"};
    for (int b = 1; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));  // any text can go on
    return std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{0});
  }();
  return vocab;
}

// The same rules whose cache walks every item on its own.
std::shared_ptr<const Grammar> without_sharing(const Grammar& g) {
  Grammar plain = g;
  plain.mask_cache = std::make_shared<MaskCache>(plain, /*share_chains=*/false);
  return std::make_shared<const Grammar>(std::move(plain));
}

// Empty when a matcher using the cache gives the full walk's mask at every step along `text` (written
// one token per character, the longest vocabulary token that spells it: so every position of a bounded
// string is met), and its end-of-text mask; else the first difference.
std::string compare_along(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const Vocabulary>& vocab,
                          const std::string& text) {
  auto plain = testing::without_mask_cache(*g);
  TokenMatcher cached(g, vocab), full(plain, vocab);
  TokenMask a((vocab->size() + 31) / 32), b(a.size());
  for (size_t at = 0;; ) {
    cached.fill_mask(a);
    full.fill_mask(b);
    if (a != b) {
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (mask_allows(a, id) != mask_allows(b, id)) {
          return "at byte " + std::to_string(at) + " of '" + text + "': token '" + vocab->bytes_of(id) + "' is " +
                 (mask_allows(a, id) ? "allowed" : "refused") + " by the cached mask, not by the full walk";
        }
      }
    }
    if (at == text.size()) return "";
    // One character (UTF-8 sequence) at a time.
    size_t len = 1;
    while (at + len < text.size() && (static_cast<uint8_t>(text[at + len]) & 0xc0) == 0x80) ++len;
    int32_t pick = -1;
    for (int32_t id = 1; id < vocab->size(); ++id) {
      if (vocab->bytes_of(id) == text.substr(at, len)) pick = id;
    }
    if (pick < 0 || !mask_allows(a, pick) || !cached.accept_token(pick) || !full.accept_token(pick)) {
      return "at byte " + std::to_string(at) + " of '" + text + "': '" + text.substr(at, len) + "' refused";
    }
    at += len;
  }
}

TEST(MaskCache, BoundedRepeatPositionsShareWalksAndMatchTheFullWalkAtEveryPosition) {
  // Strings longer and shorter than the longest token (8 bytes), with a minLength, multi-byte
  // characters and escapes, a pattern, a format, followed by different continuations; every position
  // from the first character to past maxLength compared with the full walk, then seeded random walks.
  struct Case {
    std::shared_ptr<const Grammar> g;
    std::vector<std::string> texts;
    // 1: a chain longer than the walk's reach, positions must reuse another's walk; 2: and derive theirs
    // from it; 0: none can; -1: either.
    int shares;
  };
  const std::string e = "\u00e9", euro = "\u20ac", smile = "\xf0\x9f\x98\x80";
  auto schema = [](const char* text) { return std::make_shared<const Grammar>(json_schema_grammar(Json::parse(text))); };
  const std::string long_a(40, 'a');
  auto mixed = [&](int chars) {  // a, é, x, €, 😀 in turn: `chars` characters
    const std::string cycle[] = {"a", e, "x", euro, smile};
    std::string out;
    for (int k = 0; k < chars; ++k) out += cycle[k % 5];
    return out;
  };
  const std::vector<Case> cases = {
      {schema(R"g({"type":"string","minLength":3,"maxLength":40})g"),
       {"\"" + long_a + "\"", "\"" + long_a.substr(0, 3) + "\"", "\"" + mixed(40) + "\""}, 2},
      {schema(R"g({"type":"object","properties":{"s":{"type":"string","maxLength":36},"t":{"type":"array",
          "items":{"type":"string","maxLength":24},"maxItems":3}},"required":["s","t"]})g"),
       {"{\"s\":\"" + long_a.substr(0, 36) + "\",\"t\":[\"" + long_a.substr(0, 24) + "\",\"ab\\n\\\"" + e + "\"]}",
        "{\"s\":\"" + mixed(36) + "\",\"t\":[]}"}, 2},
      {schema(R"g({"type":"string","pattern":"^[A-Z]{0,25}-[0-9]{2,20}$"})g"),
       {"\"" + std::string(25, 'A') + "-" + std::string(20, '1') + "\"", "\"AB-12\""}, 1},
      {schema(R"g({"type":"object","properties":{"at":{"type":"string","format":"date-time"},
          "u":{"type":"string","maxLength":5}},"required":["at","u"]})g"),
       {"{\"at\":\"2026-12-02T14:00:00Z\",\"u\":\"ab" + e + "cd\"}"}, -1},
      {schema(R"g({"type":"string","maxLength":6})g"), {"\"aaaaaa\"", "\"a" + e + "xx\""}, 0},
  };
  uint32_t seed = 1300;
  for (const Case& c : cases) {
    for (const std::string& text : c.texts) EXPECT_EQ(compare_along(c.g, chain_vocab(), text), "") << to_string(*c.g);
    EXPECT_EQ(testing::compare_mask_walks(c.g, chain_vocab(), seed++, 20, 60), "") << to_string(*c.g);
    const MaskCache::Stats s = c.g->mask_cache->stats();
    EXPECT_EQ(s.walks + s.shared, s.entries);
    if (c.shares >= 1) {
      EXPECT_GT(s.shared, 5u) << to_string(*c.g);
    }
    if (c.shares == 2) {
      EXPECT_GT(s.derived, 10u) << to_string(*c.g);
    } else if (c.shares == 0) {
      EXPECT_EQ(s.shared, 0u) << to_string(*c.g);
    }
  }
}

TEST(MaskCache, ChainPositionsMetInAnyOrderGetTheirOwnWalks) {
  // Requests meet a chain's positions top down, but a rollback or a second string of the same chain
  // can bring a lower position first: whichever position's walk is kept, every entry equals that
  // position's own walk. Bottom up, from the middle out, and top down again on fresh caches.
  const Json schema = Json::parse(R"g({"type":"array","items":{"type":"string","minLength":2,"maxLength":44}})g");
  auto compiled = json_schema_grammar(schema);
  auto own = without_sharing(compiled);
  EarleyMatcher m(own);
  std::vector<uint64_t> keys;  // the chain's positions, top down
  for (char ch : "[\"" + std::string(44, 'a')) {
    ASSERT_TRUE(m.accept_byte(static_cast<uint8_t>(ch)));
    for (const auto& it : m.last_set()) {
      if (it.origin < m.bytes_accepted() && m.next_symbol(it) != EarleyMatcher::kNone) {
        const uint64_t key = MaskCache::item_key(it.prod, it.dot);
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    }
  }
  ASSERT_GT(keys.size(), 40u);
  std::vector<uint64_t> middle_out;
  for (size_t k = 0; k < keys.size(); ++k) middle_out.push_back(keys[(keys.size() / 2 + k) % keys.size()]);
  const std::vector<std::vector<uint64_t>> orders = {{keys.rbegin(), keys.rend()}, middle_out, keys};
  for (const auto& order : orders) {
    Grammar fresh = compiled;
    fresh.mask_cache = std::make_shared<MaskCache>(fresh);
    auto g = std::make_shared<const Grammar>(std::move(fresh));
    for (uint64_t key : order) {
      auto a = g->mask_cache->entry(g, chain_vocab(), key);
      auto b = own->mask_cache->entry(own, chain_vocab(), key);
      EXPECT_TRUE(a->words == b->words && a->ids == b->ids && a->roots == b->roots) << "item " << (key >> 32) << "." << static_cast<uint32_t>(key);
    }
    const MaskCache::Stats s = g->mask_cache->stats();
    EXPECT_GT(s.shared + s.derived, 10u);
  }
}

TEST(MaskCache, ThreadsWalkingOneChainAtOnceMatchTheFullWalk) {
  // Four requests write strings of one chain at once, from different lengths (so one thread's full
  // walk of a position may be what another waits for, shares or derives from): every step's mask is
  // the full walk's. Under TSan this is the race check of the chain's shared walks.
  auto g = std::make_shared<const Grammar>(json_schema_grammar(Json::parse(R"g({"type":"string","maxLength":48})g")));
  std::latch start(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < errors.size(); ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      errors[t] = compare_along(g, chain_vocab(), "\"" + std::string(48 - 6 * t, static_cast<char>('a' + t)) + "\"");
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  const MaskCache::Stats s = g->mask_cache->stats();
  EXPECT_GT(s.shared + s.derived, 10u);
  EXPECT_EQ(s.walks + s.shared, s.entries);
}

TEST(MaskCache, SharedChainEntriesEqualTheirOwnWalksOnTheV4Vocabulary) {
  // The bench schema's kind of string (bench/engine/structured_schema.json: maxLength 200) on the real
  // vocabulary, shorter: at every position the entry the shared cache gives (another position's walk,
  // or derived from it) equals that position's own walk, bit for bit. The longest V4 token of string
  // characters has 128, so positions 139-131 share the first walk and 130-15 derive theirs.
  const Json schema = Json::parse(R"g({"type":"object","properties":{"title":{"type":"string","maxLength":140},
      "tags":{"type":"array","items":{"type":"string","maxLength":40},"maxItems":2}},"required":["title","tags"]})g");
  auto g = std::make_shared<const Grammar>(json_schema_grammar(schema));
  auto own = without_sharing(*g);
  auto vocab = v4_vocab();
  EarleyMatcher m(g);
  const std::string text = "{\"title\":\"" + std::string(140, 'a') + "\",\"tags\":[\"" + std::string(40, 'b') + "\"]}";
  size_t positions = 0;
  for (char ch : text) {
    ASSERT_TRUE(m.accept_byte(static_cast<uint8_t>(ch)));
    const size_t base = m.bytes_accepted();
    for (const auto& it : m.last_set()) {
      if (it.origin >= base || m.next_symbol(it) == EarleyMatcher::kNone) continue;
      const uint64_t key = MaskCache::item_key(it.prod, it.dot);
      auto a = g->mask_cache->entry(g, vocab, key);
      auto b = own->mask_cache->entry(own, vocab, key);
      EXPECT_EQ(a->words, b->words) << "at byte " << base;
      EXPECT_EQ(a->ids, b->ids) << "at byte " << base;
      EXPECT_EQ(a->roots, b->roots) << "at byte " << base;
      ++positions;
    }
  }
  EXPECT_GT(positions, 180u);
  const MaskCache::Stats s = g->mask_cache->stats();
  EXPECT_EQ(s.shared, 9u);     // the title's 139-131
  EXPECT_GT(s.derived, 130u);  // the title's 130-15, the tag's 39-15
  EXPECT_LT(s.walks - s.derived, 60u);
  EXPECT_EQ(own->mask_cache->stats().shared, 0u);
}

TEST(MaskCache, HandWrittenChainsShareOnlyWhereShapeAndFollowAgree) {
  // Rules of a bounded repeat's shape written by hand (GBNF), where sharing would go wrong if it were
  // keyed on the shape alone: n18 is also the whole of a "[...]" branch, so a position of n18 and below
  // may be followed by ']' and one of n30..n19 may not (the token "a]" tells them apart), though n30's
  // walk could stand for n18 by shape (derived: its 24-character token reaches below n18 - 24);
  // m's x reaches back into m (no chain it can share in); k's links change x half way (two chains,
  // not one).
  std::string rules = "root ::= \"<\" n30 \">\" | \"[\" n18 \"]\" | \"{\" m9 \"}\" | \"!\" k9 \"!\"\n"
                      "c ::= [a-z] | \"\u00e9\"\nd ::= [a-z] | \"(\" m3 \")\"\n";
  auto chain = [&](const std::string& n, int len, auto x_of) {
    rules += n + "1 ::= \"\" | " + x_of(1) + "\n";
    for (int k = 2; k <= len; ++k) rules += n + std::to_string(k) + " ::= \"\" | " + x_of(k) + " " + n + std::to_string(k - 1) + "\n";
  };
  chain("n", 30, [](int) { return std::string("c"); });
  chain("m", 9, [](int) { return std::string("d"); });
  chain("k", 9, [](int k) { return std::string(k > 5 ? "[a-z]" : "c"); });
  auto g = testing::ebnf(rules);
  std::string thirty_e;
  for (int k = 0; k < 30; ++k) thirty_e += "\u00e9";
  const std::vector<std::string> texts = {
      "<abcdefghijklmnopqrstuvwxyzabcd>", "[abcdefghijklmnopqr]", "<abcdefghijkl>", "[ab\u00e9defg]", "{ab(ab)cdefg}",
      "{((a)b)}", "!abcdefghi!", "<" + thirty_e + ">", "[]", "<>"};
  for (const std::string& text : texts) EXPECT_EQ(compare_along(g, chain_vocab(), text), "") << text;
  EXPECT_EQ(testing::compare_mask_walks(g, chain_vocab(), 1400, 40, 40), "");
  const MaskCache::Stats s = g->mask_cache->stats();
  EXPECT_GT(s.shared, 0u);
  EXPECT_GT(s.derived, 0u);
  EXPECT_EQ(s.walks + s.shared, s.entries);
}

}  // namespace
}  // namespace dsinfer::grammar
