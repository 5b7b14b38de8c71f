// libFuzzer target for the grammar compilers: the first byte picks GBNF/EBNF, regex or JSON Schema (or,
// from 0xF0 on, the schema as a strict tool's parameters in the DSML tool-call grammar), the rest up to
// a NUL is the source and what follows is text to match. Any source must give a grammar or a
// core::Error (invalid input), never a crash or a hang; a grammar's matcher must accept the text byte by
// byte until the first rejected byte, and a rollback must bring back the same state (the same answer for
// the next byte and the same completeness).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/earley_matcher.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/tool_calls.h"

using namespace dsinfer;

#define FUZZ_CHECK(cond)                                                \
  do {                                                                  \
    if (!(cond)) {                                                      \
      std::fprintf(stderr, "grammar_fuzz: check failed: %s\n", #cond); \
      __builtin_trap();                                                 \
    }                                                                   \
  } while (0)

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
  return 0;
}
