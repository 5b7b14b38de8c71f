// JSON Schema (the subset a grammar can enforce) to a grammar of compact JSON text. What is supported
// and how each keyword maps is listed in src/grammar/README.md; any other keyword, format or bound is an
// error naming it and its place in the schema (the server answers 400), never silently dropped.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

struct JsonSchemaOptions {
  // false: compact JSON (no whitespace between tokens), as the major engines default to; true: any JSON
  // whitespace between tokens (at most kMaxWhitespace characters each, so a model cannot loop on spaces).
  bool any_whitespace = false;
};
inline constexpr int32_t kMaxWhitespace = 20;

// Throws core::Error "json schema at <pointer>: <what>".
Grammar json_schema_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options = {});
// Any JSON object (response_format json_object).
Grammar json_object_grammar(const JsonSchemaOptions& options = {});
// Any JSON value.
Grammar json_value_grammar(const JsonSchemaOptions& options = {});

// Adds the rules of `schema` to `builder` under names starting with `prefix`, returning the rule that
// matches one instance (for grammars that embed JSON, e.g. tool-call arguments).
std::string add_json_schema_rules(const nlohmann::ordered_json& schema, GrammarBuilder& builder, const std::string& prefix,
                                  const JsonSchemaOptions& options = {});

}  // namespace dsinfer::grammar
