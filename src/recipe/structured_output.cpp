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

void read_strict_tools(OutputConstraintRequest& out, Protocol protocol, const Json& body,
                       const ConversationRequest& request, PromptVersion version) {
  const Conversation& c = request.conversation;
  if (c.tools.empty() || c.tool_choice == ToolChoice::kNone) return;
  const bool strict_by_default = protocol == Protocol::kResponses;
  bool explicitly_strict = false, any_strict = false;
  for (const ToolDefinition& t : c.tools) {
    explicitly_strict = explicitly_strict || t.strict.value_or(false);
    any_strict = any_strict || t.strict.value_or(strict_by_default);
  }
  if (!any_strict) return;
  if (!explicitly_strict && out.kind != OutputConstraintRequest::Kind::kNone) return;
  Json spec = Json::object();
  // The tag names after the DSML marker, as prompt_render writes them.
  spec["tags"] = version == PromptVersion::kV4 ? Json::array({"tool_calls", "invoke", "parameter"})
                                               : Json::array({" calls", " invoke", " parameter"});
  const ParsingOptions& p = request.parsing_options;
  spec["inside_block"] = p.tool_call_initial_stage;
  spec["thinking"] = p.reasoning_initial_stage.has_value() && *p.reasoning_initial_stage != ReasoningStage::kContent;
  bool single = request.inference_options.disable_parallel_tool_use.value_or(false);
  if (const Json* parallel = field(body, "parallel_tool_calls"); parallel != nullptr && parallel->is_boolean()) {
    single = single || !parallel->get<bool>();
  }
  spec["single_call"] = single;
  // Messages tool_choice "any" must call a tool, yet renders as auto (recipe.md §3.4): the grammar
  // forces the block.
  if (const Json* choice = field(body, "tool_choice");
      protocol == Protocol::kMessages && choice != nullptr && choice->is_object() && !p.tool_call_initial_stage) {
    const auto type = choice->find("type");
    if (type != choice->end() && *type == "any") spec["require_call"] = true;
  }
  Json tools = Json::array();
  for (const ToolDefinition& t : c.tools) {
    Json tool{{"name", t.name}, {"strict", t.strict.value_or(strict_by_default)}, {"parameters", t.parameters}};
    if (!t.strict.has_value() && strict_by_default) tool["by_default"] = true;
    tools.push_back(std::move(tool));
  }
  spec["tools"] = std::move(tools);
  set_once(out, OutputConstraintRequest::Kind::kToolCalls, to_compact_json(spec), "strict tools");
}

}  // namespace dsinfer::recipe
