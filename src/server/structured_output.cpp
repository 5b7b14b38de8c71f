#include "server/structured_output.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/tool_calls.h"
#include "recipe/prompt.h"

namespace dsinfer::server {

StructuredOutput::StructuredOutput(const tokenizer::Tokenizer& tokenizer, int32_t eos_token_id)
    : tokenizer_(tokenizer), eos_(eos_token_id) {
  if (auto id = tokenizer.added_token_id(recipe::tokens::kThinkEnd)) think_end_ = *id;
}

std::shared_ptr<const grammar::Vocabulary> StructuredOutput::vocabulary() {
  // The trie over ~129K tokens takes a fraction of a second: built by the first request that needs it.
  std::call_once(vocab_once_, [&] { vocab_ = grammar::Vocabulary::from_tokenizer(tokenizer_, {eos_}); });
  return vocab_;
}

std::shared_ptr<const grammar::Vocabulary> StructuredOutput::tool_vocabulary() {
  std::call_once(tool_vocab_once_, [&] {
    tool_vocab_ = grammar::Vocabulary::from_tokenizer(tokenizer_, {eos_}, {grammar::kDsmlMarker, grammar::kThinkEndText});
  });
  return tool_vocab_;
}

namespace {

grammar::Grammar compile_tool_calls(const std::string& source) {
  const auto spec = nlohmann::ordered_json::parse(source);
  grammar::ToolCallGrammarOptions o;
  const auto& tags = spec.at("tags");
  o.tags = {tags.at(0).get<std::string>(), tags.at(1).get<std::string>(), tags.at(2).get<std::string>()};
  o.inside_block = spec.at("inside_block").get<bool>();
  o.thinking = spec.at("thinking").get<bool>();
  o.single_call = spec.at("single_call").get<bool>();
  o.require_call = spec.value("require_call", false);
  std::vector<grammar::ToolSpec> tools;
  for (const auto& t : spec.at("tools")) {
    // Strict only by default (Responses): if_possible, not a 400 when the schema cannot be enforced.
    tools.push_back({t.at("name").get<std::string>(), t.at("parameters"), t.at("strict").get<bool>(),
                     t.value("by_default", false)});
  }
  return grammar::tool_call_grammar(tools, o);
}

using Kind = recipe::OutputConstraintRequest::Kind;

// The kind names of a constraint's source() text.
constexpr std::pair<Kind, const char*> kKindNames[] = {{Kind::kJsonSchema, "json_schema"},
                                                       {Kind::kJsonObject, "json_object"},
                                                       {Kind::kRegex, "regex"},
                                                       {Kind::kEbnf, "ebnf"},
                                                       {Kind::kToolCalls, "tool_calls"}};

std::string source_text(const recipe::OutputConstraintRequest& request, bool thinking) {
  for (const auto& [kind, name] : kKindNames) {
    if (kind == request.kind)
      return nlohmann::json{{"kind", name}, {"source", request.source}, {"thinking", thinking}}.dump();
  }
  return {};
}

}  // namespace

std::shared_ptr<engine::TokenConstraint> StructuredOutput::constraint_from_source(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  DSINFER_CHECK(j.is_object() && j.contains("kind") && j["kind"].is_string() && j.contains("source") &&
                    j["source"].is_string() && j.contains("thinking") && j["thinking"].is_boolean(),
                "structured output: the constraint must be {\"kind\", \"source\", \"thinking\"}");
  recipe::OutputConstraintRequest request;
  const std::string kind = j["kind"].get<std::string>();
  const auto* named = std::find_if(std::begin(kKindNames), std::end(kKindNames),
                                   [&](const auto& k) { return kind == k.second; });
  DSINFER_CHECK(named != std::end(kKindNames), "structured output: unknown constraint kind \"", kind, "\"");
  request.kind = named->first;
  request.source = j["source"].get<std::string>();
  return constraint_for(request, j["thinking"].get<bool>());
}

std::shared_ptr<engine::TokenConstraint> StructuredOutput::constraint_for(
    const recipe::OutputConstraintRequest& request, bool thinking) {
  std::shared_ptr<const grammar::Grammar> g;
  switch (request.kind) {
    case Kind::kNone: return nullptr;
    case Kind::kJsonObject:
      g = cache_.get("json_object", [] { return grammar::json_object_grammar(); });
      break;
    case Kind::kJsonSchema:
      g = cache_.get("json_schema:" + request.source, [&] {
        return grammar::json_schema_grammar(nlohmann::ordered_json::parse(request.source));
      });
      break;
    case Kind::kRegex:
      g = cache_.get("regex:" + request.source, [&] { return grammar::regex_grammar(request.source); });
      break;
    case Kind::kEbnf:
      g = cache_.get("ebnf:" + request.source, [&] { return grammar::compile_ebnf(request.source); });
      break;
    case Kind::kToolCalls:  // the grammar starts where the output starts, reasoning included
      g = cache_.get("tool_calls:" + request.source, [&] { return compile_tool_calls(request.source); });
      return std::make_shared<GrammarConstraint>(std::move(g), tool_vocabulary(), -1, source_text(request, thinking));
  }
  return std::make_shared<GrammarConstraint>(std::move(g), vocabulary(), thinking ? think_end_ : -1,
                                             source_text(request, thinking));
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::Grammar> grammar,
                                     std::shared_ptr<const grammar::Vocabulary> vocab, int32_t gate_token,
                                     std::string source)
    : matcher_(std::move(grammar), std::move(vocab)),
      gate_(gate_token),
      open_(gate_token < 0),
      source_(std::move(source)) {}

void GrammarConstraint::fill_mask(std::span<uint32_t> words) {
  if (open_) {
    matcher_.fill_mask(words);
    return;
  }
  std::fill(words.begin(), words.end(), ~0u);  // reasoning: anything
}

bool GrammarConstraint::accept(int32_t token) {
  if (open_) return matcher_.accept_token(token);
  ++before_gate_;
  if (token == gate_) open_ = true;
  return true;
}

void GrammarConstraint::rollback(int32_t n) {
  const int32_t in_matcher = open_ ? matcher_.tokens_accepted() : 0;
  const int32_t from_matcher = std::min(n, in_matcher);
  matcher_.rollback(from_matcher);
  n -= from_matcher;
  if (n > 0 && open_ && gate_ >= 0) open_ = false;  // the gate itself is undone
  DSINFER_CHECK_INTERNAL(n <= before_gate_, "structured output: rollback of more tokens than were accepted");
  before_gate_ -= n;
}

}  // namespace dsinfer::server
