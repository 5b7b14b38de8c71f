// What a request asks its output to follow (structured output), read from the protocol body: OpenAI Chat
// `response_format` (json_schema, json_object), Responses `text.format` (json_schema, json_object), and
// dsinfer's own `regex` and `ebnf` fields on every route, and strict tools (a tool with `strict: true`:
// Chat `tools[].function.strict`, Responses `tools[].strict`, Messages `tools[].strict` beside
// `input_schema`). The grammar itself is built by the server through grammar/; this only reads and
// checks the fields (a bad one is a ConversionError, 400).
#pragma once

#include <string>

#include "recipe/convert.h"
#include "recipe/json_text.h"
#include "recipe/prompt.h"

namespace dsinfer::recipe {

struct OutputConstraintRequest {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kEbnf, kToolCalls };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema as compact JSON text (key order kept); kRegex / kEbnf: the pattern or grammar;
  // kToolCalls: compact JSON {tags: [block, invoke, parameter], inside_block, thinking, single_call,
  // tools: [{name, strict, parameters}]} (what grammar::tool_call_grammar takes).
  std::string source;
};

OutputConstraintRequest read_output_constraint(Protocol protocol, const Json& body);

// Strict tools: when a tool of the converted request is strict and tools are in play (tool choice not
// none), `out` becomes kToolCalls: the output is plain text or the version's DSML tool-call block
// (only the block, from its first call, when the prompt opened it: tool_choice required or named;
// the block with no text before it for Messages tool_choice "any", which the prompt renders as auto),
// strict tools' parameters following their schema. `body` is read for parallel_tool_calls (Chat,
// Responses); Messages' tool_choice.disable_parallel_tool_use is in the request. Strict tools beside
// another output constraint are a bad request.
// Responses function tools are strict unless they say strict: false (OpenAI's default there): such a
// tool is marked "by_default" in the spec (the server makes it non-strict when its schema cannot be
// enforced, as OpenAI normalizes "where possible"), and tools strict only by default are dropped
// silently beside another output constraint.
void read_strict_tools(OutputConstraintRequest& out, Protocol protocol, const Json& body,
                       const ConversationRequest& request, PromptVersion version);

}  // namespace dsinfer::recipe
