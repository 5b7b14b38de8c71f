// libFuzzer target for the grammar compilers: the first byte picks GBNF/EBNF, regex or JSON Schema (or,
// from 0xF0 on, the schema as a strict tool's parameters in the DSML tool-call grammar), the rest up to
// a NUL is the source and what follows is text to match. Any source must give a grammar or a
// core::Error (invalid input), never a crash or a hang; a grammar's matcher must accept the text byte by
// byte until the first rejected byte, and a rollback must bring back the same state (the same answer for
// the next byte and the same completeness). Then the token-mask cache (grammar/mask_cache.*): over a small
// vocabulary (every byte, JSON/DSML fragments and pieces of the text), seeded random walks with rollbacks
// must get bit for bit the same mask from the grammar's shared cache as from the full trie walk.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/earley_matcher.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/mask_compare.h"
#include "grammar/regex.h"
#include "grammar/token_matcher.h"
#include "grammar/tool_calls.h"

using namespace dsinfer;

#define FUZZ_CHECK(cond)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "grammar_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                 \
    }                                                                   \
  } while (0)

namespace {

// Id 0 is end of text (no bytes: not in the trie); then every byte alone, fragments where JSON strings,
// objects and DSML blocks end and start (the tokens whose cached walks are uncertain), and the text's
// pieces of 2-6 bytes, so that walks get far into the grammar.
std::shared_ptr<const grammar::Vocabulary> small_vocabulary(std::string_view text) {
  static const char* const kFragments[] = {
      "{\"", "\":", "\",", "\"}", "\":\"", "\",\"", "},{\"", "\"]", "[\"", "]}", "}]", "abc", "abc\",", "ab\"",
      "a\"b", "\\\"", "\\n", "\\u00", "true", "false", "null", "12", "3.5", "-1", "e+", "0,", "1}", ": ", ", \"",
      "  ", "\n", "\n\n", "\u00e9", "\u65e5\u672c", "<\uff5cDSML\uff5c", "</", "\">", "=\"", "invoke", "parameter"};
  std::set<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.insert(std::string(1, static_cast<char>(b)));
  for (const char* f : kFragments) pieces.insert(f);
  for (size_t at = 0; at + 2 <= text.size() && at < 96; at += 3) {
    for (size_t len = 2; len <= 6 && at + len <= text.size(); len += 2) pieces.insert(std::string(text.substr(at, len)));
  }
  std::vector<std::string> bytes{""};
  bytes.insert(bytes.end(), pieces.begin(), pieces.end());
  return std::make_shared<const grammar::Vocabulary>(bytes, std::vector<int32_t>{0});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = all.find('\0');
  const std::string_view source = all.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
  std::shared_ptr<const grammar::Grammar> g;
  try {
    if (data[0] >= 0xF0) {
      nlohmann::ordered_json schema = nlohmann::ordered_json::parse(source, nullptr, false);
      if (schema.is_discarded()) return 0;
      grammar::ToolCallGrammarOptions o;
      o.inside_block = (data[0] & 1) != 0;
      o.thinking = (data[0] & 2) != 0;
      g = std::make_shared<const grammar::Grammar>(grammar::tool_call_grammar({{"f", schema, true}}, o));
    } else switch (data[0] % 3) {
      case 0: g = std::make_shared<const grammar::Grammar>(grammar::compile_ebnf(source)); break;
      case 1: g = std::make_shared<const grammar::Grammar>(grammar::regex_grammar(source)); break;
      default: {
        nlohmann::ordered_json schema = nlohmann::ordered_json::parse(source, nullptr, false);
        if (schema.is_discarded()) return 0;
        g = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(schema));
      }
    }
  } catch (const core::Error& e) {
    FUZZ_CHECK(e.kind() == core::ErrorKind::kInvalidInput);
    return 0;
  }
  grammar::EarleyMatcher m(g);
  size_t accepted = 0;
  for (char c : text.substr(0, 256)) {
    if (!m.accept_byte(static_cast<uint8_t>(c))) break;
    ++accepted;
  }
  FUZZ_CHECK(m.bytes_accepted() == accepted);
  const bool complete = m.is_complete();
  const grammar::ByteSet next = m.allowed_bytes();
  if (accepted > 0) {
    const uint8_t last = static_cast<uint8_t>(text[accepted - 1]);
    m.rollback(1);
    FUZZ_CHECK(m.accept_byte(last));
    FUZZ_CHECK(m.is_complete() == complete);
    FUZZ_CHECK(m.allowed_bytes() == next);
  }
  if (g->mask_cache) {
    uint32_t seed = 0;
    for (size_t i = 0; i < size; ++i) seed = seed * 31 + data[i];
    const std::string diff = grammar::testing::compare_mask_walks(g, small_vocabulary(text), seed, 2, 24);
    if (!diff.empty()) std::fprintf(stderr, "grammar_fuzz: cached and full masks differ: %s\n", diff.c_str());
    FUZZ_CHECK(diff.empty());
  }
  return 0;
}
