// Test tool of the completeness check (completeness.test.mjs): reads JSON lines
//   {"kind": "json_schema" | "regex", "source": <schema> | "<pattern>", "text": "<instance>"}
// on stdin and answers each with one line, {"ok": true} or {"ok": false, "error": "..."}: ok when the
// text, as the V4 tokenizer encodes it, is accepted token by token, every token in its step's mask,
// and end of text is allowed after it. Grammars are compiled once per source. A line with
//   "compare": {"seed": S, "walks": W, "steps": N}
// instead of "text" runs W seeded random walks of up to N tokens with rollbacks, ok when every step's
// mask from the grammar's shared mask cache equals the full trie walk's bit for bit (mask_compare.h).
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "grammar/mask_compare.h"
#include "grammar/regex.h"
#include "grammar/test_util.h"
#include "grammar/token_matcher.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr int32_t kEos = 1;  // <｜end▁of▁sentence｜>

std::string check(TokenMatcher& m, const std::string& text) {
  const tokenizer::Tokenizer& tok = testing::v4();
  const std::vector<int32_t> ids = tok.encode_plain(text);
  TokenMask mask((m.vocabulary().size() + 31) / 32);
  for (size_t i = 0; i < ids.size(); ++i) {
    m.fill_mask(mask);
    if (!mask_allows(mask, ids[i])) {
      return "token " + std::to_string(i) + " '" + std::string(tok.token_bytes(ids[i])) + "' is not in its mask";
    }
    if (!m.accept_token(ids[i])) {
      return "token " + std::to_string(i) + " '" + std::string(tok.token_bytes(ids[i])) + "' refused";
    }
  }
  m.fill_mask(mask);
  if (!mask_allows(mask, kEos)) return "end of text is not allowed after the whole text";
  return "";
}

int run() {
  auto vocab = Vocabulary::from_tokenizer(testing::v4(), {kEos});
  std::map<std::string, std::shared_ptr<const Grammar>> grammars;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    Json answer;
    try {
      const Json in = Json::parse(line);
      const std::string kind = in.at("kind").get<std::string>();
      const std::string key = kind + ":" + in.at("source").dump();
      auto& g = grammars[key];
      if (!g) {
        if (kind == "json_schema") {
          g = std::make_shared<const Grammar>(json_schema_grammar(in.at("source")));
        } else if (kind == "regex") {
          g = std::make_shared<const Grammar>(regex_grammar(in.at("source").get<std::string>()));
        } else {
          throw std::runtime_error("unknown kind '" + kind + "'");
        }
      }
      std::string error;
      if (in.contains("compare")) {
        const Json& c = in.at("compare");
        error = testing::compare_mask_walks(g, vocab, c.at("seed").get<uint32_t>(), c.at("walks").get<int>(),
                                            c.at("steps").get<int>());
      } else {
        TokenMatcher m(g, vocab);
        error = check(m, in.at("text").get<std::string>());
      }
      answer = error.empty() ? Json{{"ok", true}} : Json{{"ok", false}, {"error", error}};
    } catch (const std::exception& e) {
      answer = Json{{"ok", false}, {"error", e.what()}};
    }
    std::cout << answer.dump(-1, ' ', false, Json::error_handler_t::replace) << std::endl;
  }
  return 0;
}

}  // namespace
}  // namespace dsinfer::grammar

int main() { return dsinfer::grammar::run(); }
