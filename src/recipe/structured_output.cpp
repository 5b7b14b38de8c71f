#include "recipe/structured_output.h"

#include "recipe/conversion_error.h"
#include "recipe/request_reader.h"

namespace dsinfer::recipe {

using detail::expect_object;
using detail::field;

namespace {

void set_once(OutputConstraintRequest& out, OutputConstraintRequest::Kind kind, std::string source,
              const char* what) {
  if (out.kind != OutputConstraintRequest::Kind::kNone) {
    bad_request("structured output: ", what, " cannot be combined with another output constraint (",
                "response_format/text.format json_schema or json_object, regex, ebnf: one at most)");
  }
  out.kind = kind;
  out.source = std::move(source);
}

// {type: json_schema, ...} where the schema sits in `holder[key]`.
void read_format(OutputConstraintRequest& out, const Json& format, const std::string& path, const Json& holder,
                 const std::string& holder_path) {
  const std::string type = detail::require_string(format, "type", path);
  if (type == "json_object") {
    set_once(out, OutputConstraintRequest::Kind::kJsonObject, "", path.c_str());
  } else if (type == "json_schema") {
    const Json* schema = field(holder, "schema");
    if (schema == nullptr) bad_request(holder_path, ": missing field `schema`");
    if (!schema->is_object() && !schema->is_boolean()) bad_request(holder_path, ".schema must be a JSON object");
    set_once(out, OutputConstraintRequest::Kind::kJsonSchema, to_compact_json(*schema), path.c_str());
  }
}

}  // namespace

OutputConstraintRequest read_output_constraint(Protocol protocol, const Json& body) {
  OutputConstraintRequest out;
  if (protocol == Protocol::kChatCompletions) {
    if (const Json* rf = field(body, "response_format")) {
      expect_object(*rf, "response_format");
      if (detail::require_string(*rf, "type", "response_format") == "json_schema") {
        const Json& js = expect_object(detail::require_field(*rf, "json_schema", "response_format"),
                                       "response_format.json_schema");
        read_format(out, *rf, "response_format", js, "response_format.json_schema");
      } else {
        read_format(out, *rf, "response_format", *rf, "response_format");
      }
    }
  } else if (protocol == Protocol::kResponses) {
    if (const Json* text = field(body, "text")) {
      expect_object(*text, "text");
      if (const Json* f = field(*text, "format")) {
        expect_object(*f, "text.format");
        read_format(out, *f, "text.format", *f, "text.format");
      }
    }
  }
  if (const Json* re = field(body, "regex")) {
    set_once(out, OutputConstraintRequest::Kind::kRegex, detail::expect_string(*re, "regex"), "regex");
  }
  if (const Json* eb = field(body, "ebnf")) {
    set_once(out, OutputConstraintRequest::Kind::kEbnf, detail::expect_string(*eb, "ebnf"), "ebnf");
  }
  return out;
}

}  // namespace dsinfer::recipe
