// Strict tool calls: a grammar of the model's DSML tool-call block (docs/specs/recipe.md §2.7-2.8) whose
// parameters follow each tool's JSON Schema, so the recipe's stream parser always assembles arguments
// that validate. String parameters of a plain {"type": "string"} schema may be written raw
// (string="true"); every other value is JSON (string="false"; Python-style spacing accepted).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

// "｜DSML｜" (U+FF5C on both sides): the template writes it inside angle brackets.
inline constexpr const char* kDsmlMarker = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
inline constexpr const char* kThinkEndText = "</think>";

// The tag names after the marker: V4 "tool_calls", "invoke", "parameter"; V4.1 " calls", " invoke",
// " parameter".
struct ToolCallTags {
  std::string block = " calls";
  std::string invoke = " invoke";
  std::string parameter = " parameter";
};

struct ToolSpec {
  std::string name;
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();
  // false: the call's frame is still enforced, its parameters are any names with any values.
  bool strict = true;
  // Strict only when its parameters' schema can be enforced, else as strict = false instead of an
  // error (Responses tools that do not say strict: OpenAI normalizes them "where possible").
  bool strict_if_possible = false;
};

struct ToolCallGrammarOptions {
  ToolCallTags tags;
  // The prompt already opened the block (tool_choice required or a named tool): the output is one or
  // more calls and the block's end. Otherwise any text without a DSML marker, optionally followed by a
  // block (tool_choice auto).
  bool inside_block = false;
  bool thinking = false;        // the output starts with reasoning (no DSML marker, no </think>) and </think>
  bool single_call = false;     // parallel tool use disabled: exactly one call in a block
  // A call is required but the prompt did not open the block (Messages tool_choice "any", which the
  // recipe renders as auto): the answer is the block, from its opening marker (after the template's
  // "\n\n" or nothing), with no text before it.
  bool require_call = false;
};

// Throws core::Error naming the tool and what is wrong (unsupported schema keyword, a parameter name a
// DSML attribute cannot carry).
Grammar tool_call_grammar(const std::vector<ToolSpec>& tools, const ToolCallGrammarOptions& options);

// Text that never contains '<' followed by any of `forbidden` (each a '<'-free string of code points,
// none a prefix of another): what the stream parser reads as plain text, not a marker.
Expr text_without(const std::vector<std::u32string>& forbidden);

}  // namespace dsinfer::grammar
