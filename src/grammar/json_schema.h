// JSON Schema (the subset a grammar can enforce) to a grammar of compact JSON text. What is supported
// and how each keyword maps is listed in src/grammar/README.md; any other keyword, format or bound is an
// error naming it and its place in the schema (the server answers 400), never silently dropped.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

struct JsonSchemaOptions {
  // false: compact JSON (no whitespace between tokens), as the major engines default to; true: any JSON
  // whitespace between tokens (at most kMaxWhitespace characters each, so a model cannot loop on spaces).
  bool any_whitespace = false;
  // '<' in strings only as \u003c: JSON inside a DSML parameter, where a raw "</｜DSML｜" would end the
  // value for the recipe's parser.
  bool escape_lt = false;
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

// An object schema split into its members, for grammars that write each member on its own (DSML
// tool-call parameters): the listed properties in schema order with the rule of their value, and the
// rule of any other key's value (`extra`, empty = none; only when no property is listed, as for
// json_schema_grammar). Only `properties`, `required`, `additionalProperties`, `type: object`, `$defs`
// and annotations may sit at the top level; anything else is an error naming it.
struct JsonObjectMembers {
  struct Member {
    std::string key;
    std::string rule;
    bool required;
    bool plain_string;  // {"type": "string"} and annotations only: any text is a valid value
    // Otherwise the rule of the strings the schema accepts as raw text (unquoted; enum and const
    // strings, patterns, formats, lengths; never a '<'), empty when there is none.
    std::string raw_rule;
  };
  std::vector<Member> members;
  std::string extra;
};
JsonObjectMembers json_object_members(const nlohmann::ordered_json& schema, GrammarBuilder& builder,
                                      const std::string& prefix, const JsonSchemaOptions& options = {});

}  // namespace dsinfer::grammar
