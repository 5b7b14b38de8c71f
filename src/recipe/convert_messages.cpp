// Anthropic Messages -> ConversationRequest (spec §3.4). Every user text/image/document block becomes its
// own User message (the encoder's merge joins them with "\n\n"); tool_result blocks become Tool messages
// and must answer every tool_use of the previous assistant message before anything else.
#include <map>
#include <set>

#include "recipe/convert.h"
#include "recipe/protocol_common.h"
#include "recipe/request_reader.h"

namespace dsinfer::recipe {
namespace {

using namespace detail;

ImageSource read_image(const Json& block, const std::string& path) {
  const Json& source = expect_object(require_field(block, "source", path), path + ".source");
  const std::string type = expect_variant(require_string(source, "type", path + ".source"), {"base64", "url", "file"},
                                          path + ".source.type");
  if (type == "base64")
    return base64_image_source(require_string(source, "media_type", path + ".source"),
                               require_string(source, "data", path + ".source"), path);
  if (type == "url") return external_image_source(require_string(source, "url", path + ".source"), std::nullopt, path);
  file_id_unsupported(path);
}

// Text-like blocks (text, tool_reference, image, document) as one piece of content.
std::pair<std::string, std::vector<ImageSource>> text_like_block(const Json& block, const std::string& type,
                                                                 const std::string& path) {
  if (type == "text") return {require_string(block, "text", path), {}};
  if (type == "tool_reference") return {require_string(block, "tool_name", path), {}};
  if (type == "image") return {kImagePlaceholder, {read_image(block, path)}};
  if (type == "document") return {kUnsupportedDocument, {}};
  bad_request("Unsupported content block");
}

// A string or a list of text-like blocks joined with "\n\n" (system prompts, tool results).
std::pair<std::string, std::vector<ImageSource>> text_or_blocks(const Json& value, const std::string& path) {
  if (value.is_string()) return {value.get<std::string>(), {}};
  if (!value.is_array()) invalid_type(path, value, "a string or an array of content blocks");
  std::vector<std::string> texts;
  std::vector<ImageSource> images;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string bpath = at_index(path, i);
    const Json& block = expect_object(value[i], bpath);
    auto [text, imgs] = text_like_block(block, require_string(block, "type", bpath), bpath);
    texts.push_back(std::move(text));
    for (auto& img : imgs) images.push_back(std::move(img));
  }
  return {join(texts, "\n\n"), std::move(images)};
}

bool text_has_placeholder(const Json& value) {
  if (value.is_string()) return contains_image_placeholder(value.get_ref<const std::string&>());
  if (!value.is_array()) return false;
  for (const auto& block : value) {
    for (const char* key : {"text", "tool_name", "thinking"}) {
      const Json* t = field(block, key);
      if (t && t->is_string() && contains_image_placeholder(t->get_ref<const std::string&>())) return true;
    }
    if (const Json* type = field(block, "type"); type && *type == "tool_result") {
      if (const Json* c = field(block, "content"); c && text_has_placeholder(*c)) return true;
    }
  }
  return false;
}

std::string join_ids(const std::map<std::string, size_t>& ids) {
  std::vector<std::string> keys;
  for (const auto& [id, index] : ids) keys.push_back(id);
  return join(keys, ", ");
}

void check_tool_use_resolved(size_t message_index, const std::map<std::string, size_t>& ids) {
  if (ids.empty()) return;
  bad_request("messages.", message_index, ": `tool_use` ids were found without `tool_result` blocks immediately after: ",
              join_ids(ids), ". Each `tool_use` block must have a corresponding `tool_result` block in the next message.");
}

std::vector<InputMessage> transform_messages(const Json& messages, const Json* system, const ConversionOptions& options) {
  if (messages.empty()) bad_request("messages: at least one message is required");
  bool placeholder = system && text_has_placeholder(*system);
  for (const auto& m : messages)
    if (const Json* c = field(m, "content"); c && text_has_placeholder(*c)) placeholder = true;
  if (placeholder) image_placeholder_not_allowed();

  std::vector<InputMessage> out;
  if (system) {
    auto [text, images] = text_or_blocks(*system, "system");
    if (!images.empty()) image_not_allowed("system");
    out.push_back(InputMessage::system(std::move(text)));
  }
  std::map<std::string, size_t> open_tool_uses;  // sorted, as the error lists them
  for (size_t mi = 0; mi < messages.size(); ++mi) {
    const std::string path = core::str_cat("messages.", mi);
    const Json& message = expect_object(messages[mi], path);
    const std::string role =
        expect_variant(require_string(message, "role", path), {"user", "assistant", "system"}, path + ".role");
    const Json* content = field(message, "content");
    if (content == nullptr) bad_request(path, ": all messages must have non-empty content");
    if (role == "system") {
      check_tool_use_resolved(mi, open_tool_uses);
      auto [text, images] = text_or_blocks(*content, path);
      out.push_back(InputMessage::user("<system-reminder>\n" + text + "\n</system-reminder>", std::move(images)));
      continue;
    }
    if (content->is_string()) {
      check_tool_use_resolved(mi, open_tool_uses);
      if (role == "user") out.push_back(InputMessage::user(content->get<std::string>()));
      else out.push_back(InputMessage::assistant(content->get<std::string>()));
      continue;
    }
    if (!content->is_array()) invalid_type(path + ".content", *content, "a string or an array of content blocks");
    if (content->empty()) bad_request(path, ": all messages must have non-empty content");
    if (role == "user") {
      std::set<std::string> matched;
      for (size_t bi = 0; bi < content->size(); ++bi) {
        const std::string bpath = core::str_cat(path, ".content[", bi, "]");
        const Json& block = expect_object((*content)[bi], bpath);
        const std::string type = require_string(block, "type", bpath);
        if (type == "text" || type == "tool_reference" || type == "image" || type == "document") {
          check_tool_use_resolved(mi, open_tool_uses);
          auto [text, images] = text_like_block(block, type, bpath);
          out.push_back(InputMessage::user(std::move(text), std::move(images)));
        } else if (type == "tool_result") {
          const std::string id = require_string(block, "tool_use_id", bpath);
          if (matched.count(id)) {
            bad_request("messages.", mi, ".content.", bi,
                        ": each tool_use must have a single result. Found multiple `tool_result` blocks with id: ", id);
          } else if (!open_tool_uses.count(id)) {
            bad_request("unexpected `messages.", mi, ".content.", bi, ": tool_use_id` found in `tool_result` blocks: ", id,
                        ". Each `tool_result` block must have a corresponding `tool_use` block in the previous message.");
          }
          open_tool_uses.erase(id);
          matched.insert(id);
          opt_bool(block, "is_error", bpath);
          std::pair<std::string, std::vector<ImageSource>> result;
          if (const Json* c = field(block, "content")) result = text_or_blocks(*c, bpath + ".content");
          out.push_back(InputMessage::tool(std::move(result.first), std::move(result.second), id));
        } else if (type == "tool_use") {
          bad_request("messages.", mi, ": `tool_use` blocks can only be in `assistant` messages");
        } else if (type == "thinking") {
          bad_request("messages.", mi, ".content: thinking blocks may only be in `assistant` messages");
        } else if (type == "server_tool_use") {
          bad_request("messages.", mi, ": `server_tool_use` blocks can only be in `assistant` messages");
        } else if (type == "web_search_tool_result") {
          bad_request("messages.", mi, ": `web_search_tool_result` blocks can only be in `assistant` messages");
        } else {
          bad_request("Unsupported content block");
        }
      }
      check_tool_use_resolved(mi > 0 ? mi - 1 : 0, open_tool_uses);
    } else {
      check_tool_use_resolved(mi, open_tool_uses);
      std::string text;
      bool has_text = false;
      std::string reasoning;
      bool has_reasoning = false;
      std::vector<ToolCall> calls;
      for (size_t bi = 0; bi < content->size(); ++bi) {
        const std::string bpath = core::str_cat(path, ".content[", bi, "]");
        const Json& block = expect_object((*content)[bi], bpath);
        const std::string type = require_string(block, "type", bpath);
        if (type == "text" || type == "tool_reference" || type == "image" || type == "document") {
          if (!calls.empty())
            bad_request("messages.", mi, ".", bi, ": `tool_use` ids were found without `tool_result` blocks immediately after: ",
                        join_ids(open_tool_uses),
                        ". Each `tool_use` block must have a corresponding `tool_result` block in the next message.");
          auto [piece, images] = text_like_block(block, type, bpath);
          if (!images.empty()) image_not_allowed("assistant");
          if (has_text && !text.empty()) text += "\n\n";
          text += piece;
          has_text = true;
        } else if (type == "tool_use") {
          ToolCall call;
          call.id = require_string(block, "id", bpath);
          call.name = require_string(block, "name", bpath);
          call.arguments = to_python_json(require_field(block, "input", bpath));
          if (open_tool_uses.count(call.id))
            bad_request("messages.", mi, ".content.", bi, ": `tool_use` ids must be unique");
          open_tool_uses[call.id] = bi;
          calls.push_back(std::move(call));
        } else if (type == "tool_result") {
          bad_request("messages.", mi, ": `tool_result` blocks can only be in `user` messages");
        } else if (type == "thinking") {
          const std::string thinking = require_string(block, "thinking", bpath);
          reasoning = has_reasoning ? reasoning + "\n\n" + thinking : thinking;
          has_reasoning = true;
        } else if (type == "server_tool_use" || type == "web_search_tool_result") {
          if (options.messages_web_search == WebSearchBehavior::kReject)
            bad_request("Unsupported content block: server tools are not supported");
        } else {
          bad_request("Unsupported content block");
        }
      }
      out.push_back(InputMessage::assistant(std::move(text), std::move(reasoning), std::move(calls)));
    }
  }
  check_tool_use_resolved(messages.size() - 1, open_tool_uses);
  return out;
}

std::optional<ReasoningEffort> messages_effort(const std::string& effort) {
  if (effort == "low") return ReasoningEffort::kLow;
  if (effort == "medium" || effort == "high") return ReasoningEffort::kHigh;
  if (effort == "xhigh") return ReasoningEffort::kXhigh;
  return ReasoningEffort::kMax;  // ultra, max
}

}  // namespace

ConvertedRequest convert_messages(const Json& body, const ConversionOptions& options) {
  expect_object(body, "", "struct MessagesRequest");
  const std::string model = require_string(body, "model", "");
  const Json& messages = expect_array(require_field(body, "messages", ""), "messages");
  const auto max_tokens = opt_u32(body, "max_tokens", "");
  const auto temperature = opt_f32(body, "temperature", "");
  const auto top_p = opt_f32(body, "top_p", "");
  const auto stream = opt_bool(body, "stream", "");
  std::vector<std::string> stop_sequences;
  if (const Json* s = field(body, "stop_sequences")) {
    expect_array(*s, "stop_sequences");
    for (size_t i = 0; i < s->size(); ++i) stop_sequences.push_back(expect_string((*s)[i], at_index("stop_sequences", i)));
  }
  std::optional<std::string> thinking_type;
  std::optional<uint64_t> budget_tokens;
  if (const Json* th = field(body, "thinking")) {
    expect_object(*th, "thinking");
    thinking_type = expect_variant(require_string(*th, "type", "thinking"), {"enabled", "adaptive", "disabled"},
                                   "thinking.type");
    budget_tokens = opt_u64(*th, "budget_tokens", "thinking");
  }
  std::optional<std::string> effort_text;
  if (const Json* oc = field(body, "output_config")) {
    expect_object(*oc, "output_config");
    if (auto e = opt_string(*oc, "effort", "output_config"))
      effort_text = expect_variant(*e, {"low", "medium", "high", "xhigh", "ultra", "max"}, "output_config.effort");
  }
  std::optional<std::string> choice_type, choice_name;
  std::optional<bool> disable_parallel;
  if (const Json* c = field(body, "tool_choice")) {
    expect_object(*c, "tool_choice");
    choice_type = expect_variant(require_string(*c, "type", "tool_choice"), {"auto", "any", "tool", "none"},
                                 "tool_choice.type");
    if (*choice_type == "tool") choice_name = require_string(*c, "name", "tool_choice");
    disable_parallel = opt_bool(*c, "disable_parallel_tool_use", "tool_choice");
  }
  const Json* system = field(body, "system");

  // Thinking: an explicit switch, then an effort, then the default.
  bool thinking = options.default_thinking_mode;
  if (thinking_type) thinking = *thinking_type != "disabled";
  else if (effort_text) thinking = true;
  std::optional<ReasoningEffort> effort;
  if (thinking) effort = effort_text ? messages_effort(*effort_text) : ReasoningEffort::kHigh;

  validate_max_tokens(max_tokens, "max_tokens");
  validate_sampling(temperature, top_p);
  bool bad_stops = stop_sequences.size() > kMaxStopSequences;
  for (const auto& s : stop_sequences) bad_stops = bad_stops || s.empty();
  if (bad_stops) bad_request("stop_sequences must contain at most 16 non-empty strings");
  InferenceOptions inference;
  inference.max_tokens = max_tokens;
  inference.temperature = temperature;
  inference.top_p = top_p;
  inference.thinking_budget_tokens = budget_tokens;
  if (choice_type && *choice_type != "none") inference.disable_parallel_tool_use = disable_parallel;

  // Tools.
  std::vector<ToolDefinition> definitions;
  std::set<std::string> names, ignored_server_tools;
  if (const Json* tools = field(body, "tools")) {
    expect_array(*tools, "tools");
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string tpath = core::str_cat("tools.", i);
      const Json& tool = expect_object((*tools)[i], tpath);
      const std::string name = require_string(tool, "name", tpath);
      if (auto type = opt_string(tool, "type", tpath)) {
        if (type->rfind("web_search", 0) == 0 && options.messages_web_search == WebSearchBehavior::kIgnore) {
          ignored_server_tools.insert(name);
          continue;
        }
        bad_request(tpath, ": server tools are not supported");
      }
      validate_tool_name(name, tpath + ".name");
      if (!names.insert(name).second) bad_request("Tool names must be unique");
      const Json* schema = field(tool, "input_schema");
      if (schema == nullptr) bad_request(tpath, ": missing input_schema");
      validate_tool_parameters(*schema, tpath + ".input_schema");
      ToolDefinition def;
      def.name = name;
      def.description = opt_string(tool, "description", tpath);
      def.parameters = *schema;
      def.strict = opt_bool(tool, "strict", tpath);  // dsinfer: constrains the call's input (server README)
      definitions.push_back(std::move(def));
    }
  }
  ToolChoice tool_choice = ToolChoice::kAuto;
  if (choice_type && *choice_type == "none") {
    definitions.clear();
    tool_choice = ToolChoice::kNone;
  } else if (choice_type && *choice_type == "tool" && !ignored_server_tools.count(*choice_name)) {
    if (!names.count(*choice_name)) bad_request("tool_choice: no tool named '", *choice_name, "' was specified");
    if (thinking) bad_request("Thinking mode does not support this tool_choice");
    std::vector<ToolDefinition> kept;
    for (auto& d : definitions)
      if (d.name == *choice_name) kept.push_back(std::move(d));
    definitions = std::move(kept);
    tool_choice = ToolChoice::kRequired;
  }

  std::vector<InputMessage> converted = transform_messages(messages, system, options);
  validate_tool_text(definitions, converted);

  ConvertedRequest out;
  out.protocol = Protocol::kMessages;
  ConversationRequest& r = out.request;
  r.model = model;
  r.stream = stream.value_or(false);
  r.conversation.messages = std::move(converted);
  r.conversation.thinking_mode = thinking;
  r.conversation.tools = std::move(definitions);
  r.conversation.tool_choice = tool_choice;
  r.conversation.reasoning_effort = effort;
  r.inference_options = inference;
  ParsingOptions& p = r.parsing_options;
  p.parse_tool_calls = !r.conversation.tools.empty();
  p.tool_call_initial_stage = tool_choice == ToolChoice::kRequired;
  if (thinking) p.reasoning_initial_stage = ReasoningStage::kStart;
  p.stop_sequences = std::move(stop_sequences);
  return out;
}

}  // namespace dsinfer::recipe
