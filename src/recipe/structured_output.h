// What a request asks its output to follow (structured output), read from the protocol body: OpenAI Chat
// `response_format` (json_schema, json_object), Responses `text.format` (json_schema, json_object), and
// dsinfer's own `regex` and `ebnf` fields on every route. The grammar itself is built by the server
// through grammar/; this only reads and checks the fields (a bad one is a ConversionError, 400).
#pragma once

#include <string>

#include "recipe/convert.h"
#include "recipe/json_text.h"

namespace dsinfer::recipe {

struct OutputConstraintRequest {
  enum class Kind { kNone, kJsonSchema, kJsonObject, kRegex, kEbnf };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema as compact JSON text (key order kept); kRegex / kEbnf: the pattern or grammar.
  std::string source;
};

OutputConstraintRequest read_output_constraint(Protocol protocol, const Json& body);

}  // namespace dsinfer::recipe
