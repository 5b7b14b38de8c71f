// OpenAI Responses -> ConversationRequest (spec §3.3). Input items are replayed in order: function calls
// collect into a group that is flushed (calls sorted by call_id, then their outputs) once every call
// has an output.
#include <algorithm>
#include <map>
#include <set>

#include "recipe/convert.h"
#include "recipe/protocol_common.h"
#include "recipe/request_reader.h"

namespace dsinfer::recipe {
namespace {

using namespace detail;

constexpr const char* kApplyPatch = "apply_patch";

// Written for this port: the upstream APPLY_PATCH_DESCRIPTION constant was not available (see README).
constexpr const char* kApplyPatchDescription =
    "Edit files by applying a patch. The input is the whole patch, starting with the line *** Begin Patch and "
    "ending with the line *** End Patch. Inside it, each file change starts with *** Add File: <path>, "
    "*** Delete File: <path> or *** Update File: <path>. Added files list their lines prefixed with +. Updates "
    "give one or more hunks introduced by @@ (optionally followed by a line that locates the hunk), with context "
    "lines prefixed by a space, removed lines by - and added lines by +. Paths are relative to the workspace.";

Json apply_patch_parameters() {
  Json input = Json::object();
  input["type"] = "string";
  input["description"] = "The entire patch, from *** Begin Patch to *** End Patch.";
  Json properties = Json::object();
  properties["input"] = std::move(input);
  Json schema = Json::object();
  schema["type"] = "object";
  schema["additionalProperties"] = false;
  schema["properties"] = std::move(properties);
  schema["required"] = Json::array({"input"});
  return schema;
}

// Text, image and file blocks of a message or a tool output, joined with "\n\n".
std::pair<std::string, std::vector<ImageSource>> read_blocks(const Json& blocks, const std::string& path,
                                                             bool message_blocks) {
  std::vector<std::string> texts;
  std::vector<ImageSource> images;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::string bpath = at_index(path, i);
    const Json& block = expect_object(blocks[i], bpath);
    const std::string type = require_string(block, "type", bpath);
    if (type == "input_text" || (message_blocks && type == "output_text")) {
      texts.push_back(require_string(block, "text", bpath));
    } else if (type == "input_image") {
      std::optional<std::string> url = opt_string(block, "image_url", bpath);
      if (url && url->empty()) url.reset();
      const bool has_file = field(block, "file_id") != nullptr;
      std::optional<ImageDetail> detail;
      if (auto d = opt_string(block, "detail", bpath)) detail = parse_image_detail(*d, bpath + ".detail");
      if (!url && !has_file) bad_request(bpath, ": input_image must have image_url or file_id");
      if (url && has_file) bad_request(bpath, ": input_image cannot have both image_url and file_id");
      if (!url) file_id_unsupported(bpath);
      images.push_back(image_url_source(*url, detail, bpath + ".image_url"));
      texts.push_back(kImagePlaceholder);
    } else if (type == "input_file") {
      texts.push_back(kUnsupportedDocument);
    } else {
      bad_request("Unsupported content block");
    }
  }
  return {join(texts, "\n\n"), std::move(images)};
}

std::pair<std::string, std::vector<ImageSource>> read_content(const Json& content, const std::string& path,
                                                              bool message_blocks) {
  if (content.is_string()) return {content.get<std::string>(), {}};
  if (!content.is_array()) invalid_type(path, content, "a string or an array of content blocks");
  return read_blocks(content, path, message_blocks);
}

bool text_has_placeholder(const Json& content, bool message_blocks) {
  if (content.is_string()) return contains_image_placeholder(content.get_ref<const std::string&>());
  if (!content.is_array()) return false;
  for (const auto& block : content) {
    const Json* type = field(block, "type");
    const Json* text = field(block, "text");
    if (type && text && type->is_string() && text->is_string() &&
        (*type == "input_text" || (message_blocks && *type == "output_text")) &&
        contains_image_placeholder(text->get_ref<const std::string&>()))
      return true;
  }
  return false;
}

struct FunctionTool {
  std::string name;
  std::optional<std::string> description;
  std::optional<Json> parameters;
  std::optional<bool> strict;
};

struct ToolSet {
  std::vector<FunctionTool> definitions;
  std::map<std::pair<std::string, std::string>, std::string> namespace_names;  // (ns, name) -> flat name
  std::set<std::string> top_level_names;

  bool taken(const std::string& candidate) const {
    if (top_level_names.count(candidate)) return true;
    for (const auto& [key, name] : namespace_names)
      if (name == candidate) return true;
    return false;
  }
};

template <typename Taken>
std::string unique_name(const std::string& base, Taken&& taken) {
  if (!taken(base)) return base;
  for (int k = 1;; ++k) {
    std::string candidate = core::str_cat(base, "_", k);
    if (!taken(candidate)) return candidate;
  }
}

FunctionTool read_function_tool(const Json& tool, const std::string& path) {
  FunctionTool f;
  f.name = require_string(tool, "name", path);
  f.description = opt_string(tool, "description", path);
  if (const Json* p = field(tool, "parameters")) f.parameters = *p;
  f.strict = opt_bool(tool, "strict", path);
  return f;
}

bool is_web_search(const std::string& type) { return type == "web_search" || type == "web_search_2025_08_26"; }

ToolSet convert_tools(const Json* tools, const ConversionOptions& options) {
  ToolSet set;
  if (tools == nullptr) return set;
  expect_array(*tools, "tools");
  for (const auto& tool : *tools) {
    const Json* type = field(tool, "type");
    const Json* name = field(tool, "name");
    if (type && *type == "function" && name && name->is_string()) set.top_level_names.insert(name->get<std::string>());
  }
  std::set<std::string> namespaces;
  for (size_t index = 0; index < tools->size(); ++index) {
    const std::string path = core::str_cat("tools[", index, "]");
    const Json& tool = expect_object((*tools)[index], path);
    const std::string type = require_string(tool, "type", path);
    if (type == "function") {
      FunctionTool f = read_function_tool(tool, path);
      validate_tool_name(f.name, path + ".name");
      set.definitions.push_back(std::move(f));
    } else if (type == "namespace") {
      const std::string ns = require_string(tool, "name", path);
      const auto ns_description = opt_string(tool, "description", path);
      validate_tool_name(ns, path + ".name");
      if (!namespaces.insert(ns).second) bad_request(path, ": duplicate namespace name '", ns, "'");
      std::set<std::string> inner_names;
      const Json& inner = expect_array(require_field(tool, "tools", path), path + ".tools");
      for (size_t k = 0; k < inner.size(); ++k) {
        const std::string ipath = core::str_cat(path, ".tools[", k, "]");
        const Json& member = expect_object(inner[k], ipath);
        if (require_string(member, "type", ipath) != "function")
          bad_request(ipath, ": custom tools are not supported inside a namespace");
        FunctionTool f = read_function_tool(member, ipath);
        validate_tool_name(f.name, ipath + ".name");
        if (!inner_names.insert(f.name).second) bad_request(ipath, ": tool names within a namespace must be unique");
        if (ns_description && !ns_description->empty()) f.description = *ns_description + "\n" + f.description.value_or("");
        const std::string flat = unique_name(ns + "::" + f.name, [&](const std::string& c) { return set.taken(c); });
        set.namespace_names[{ns, f.name}] = flat;
        f.name = flat;
        set.definitions.push_back(std::move(f));
      }
    } else if (type == "custom") {
      const std::string name = require_string(tool, "name", path);
      if (name != kApplyPatch) bad_request("Unsupported custom tool: '", name, "'. Only 'apply_patch' is supported");
      FunctionTool f;
      f.name = kApplyPatch;
      f.description = kApplyPatchDescription;
      f.parameters = apply_patch_parameters();
      set.definitions.push_back(std::move(f));
    } else if (is_web_search(type)) {
      if (options.responses_web_search == WebSearchBehavior::kReject) bad_request("Server tools are not supported");
    }
    // Other tool types are ignored.
  }
  return set;
}

struct PendingGroup {
  std::vector<ToolCall> calls;
  std::map<std::string, std::pair<std::string, std::vector<ImageSource>>> outputs;
};

// Ordered set of call ids, so the first unanswered call is reported deterministically.
struct CallIds {
  std::vector<std::string> order;
  std::set<std::string> members;
  bool contains(const std::string& id) const { return members.count(id) != 0; }
  void add(const std::string& id) {
    if (members.insert(id).second) order.push_back(id);
  }
  void remove(const std::string& id) { members.erase(id); }
  std::optional<std::string> first() const {
    for (const auto& id : order)
      if (contains(id)) return id;
    return std::nullopt;
  }
};

class ItemTransformer {
 public:
  ItemTransformer(std::vector<InputMessage>& messages, const ToolSet& tools) : messages_(messages), tools_(tools) {}

  void run(const Json& items) {
    if (items.empty()) bad_request("Input items array must not be empty");
    for (size_t i = 0; i < items.size(); ++i) item(items[i], i);
    flush();
    check_pending();
  }

 private:
  void check_pending() {
    if (auto id = pending_.first()) bad_request("No tool output found for tool call ", *id, ".");
  }

  void flush() {
    if (!group_) return;
    PendingGroup group = std::move(*group_);
    group_.reset();
    if (group.calls.empty()) return;
    std::stable_sort(group.calls.begin(), group.calls.end(),
                     [](const ToolCall& a, const ToolCall& b) { return a.id < b.id; });
    std::vector<InputMessage> results;
    for (const auto& call : group.calls) {
      auto it = group.outputs.find(call.id);
      if (it == group.outputs.end()) continue;
      results.push_back(InputMessage::tool(it->second.first, it->second.second, call.id));
      group.outputs.erase(it);
    }
    if (messages_.empty() || messages_.back().role != Role::kAssistant) messages_.push_back(InputMessage::assistant(""));
    auto& calls = messages_.back().tool_calls;
    calls.insert(calls.end(), group.calls.begin(), group.calls.end());
    for (auto& r : results) messages_.push_back(std::move(r));
  }

  void check_call_id(size_t index, const std::string& id) {
    if (id.empty())
      bad_request("Invalid 'input[", index,
                  "].call_id': empty string. Expected a string with minimum length 1, but got an empty string instead.");
    if (pending_.contains(id) || resolved_.contains(id)) bad_request("Duplicate 'call_id': ", id, ".");
  }

  void check_output_id(size_t index, const std::string& id) {
    if (id.empty())
      bad_request("Invalid 'input[", index,
                  "].call_id': empty string. Expected a string with minimum length 1, but got an empty string instead.");
    if (!pending_.contains(id)) {
      if (resolved_.contains(id)) bad_request("Duplicate tool output for call_id: ", id, ".");
      bad_request("No tool call found for tool output with call_id ", id, ".");
    }
    pending_.remove(id);
    resolved_.add(id);
  }

  void add_call(ToolCall call) {
    if (!group_) group_.emplace();
    group_->calls.push_back(std::move(call));
  }

  void add_output(const std::string& id, std::pair<std::string, std::vector<ImageSource>> output) {
    if (!group_) {
      messages_.push_back(InputMessage::tool(std::move(output.first), std::move(output.second), id));
      return;
    }
    group_->outputs[id] = std::move(output);
    if (group_->outputs.size() >= group_->calls.size()) flush();
  }

  void message(const Json& item, const std::string& path) {
    const std::string role =
        expect_variant(require_string(item, "role", path), {"user", "developer", "system", "assistant"}, path + ".role");
    const Json& content = require_field(item, "content", path);
    if (role == "system") {
      auto [text, images] = read_content(content, path, true);
      if (!images.empty()) image_not_allowed("system");
      messages_.push_back(InputMessage::system(std::move(text)));
    } else if (role == "user" || role == "developer") {
      auto [text, images] = read_content(content, path, true);
      messages_.push_back(InputMessage::user(std::move(text), std::move(images)));
    } else {
      auto [text, images] = read_content(content, path, true);
      if (!images.empty()) image_not_allowed("assistant");
      if (!messages_.empty() && messages_.back().role == Role::kAssistant && messages_.back().tool_calls.empty()) {
        InputMessage& last = messages_.back();
        if (!text.empty()) {
          if (!last.content.empty()) last.content += "\n\n";
          last.content += text;
        }
        return;
      }
      messages_.push_back(InputMessage::assistant(std::move(text)));
    }
  }

  void reasoning(const Json& item, const std::string& path) {
    std::vector<std::string> texts;
    if (const Json* content = field(item, "content")) {
      expect_array(*content, path + ".content");
      for (size_t i = 0; i < content->size(); ++i)
        texts.push_back(require_string((*content)[i], "text", at_index(path + ".content", i)));
    }
    const std::string text = join(texts, "\n");
    if (text.empty()) return;
    if (messages_.empty() || messages_.back().role != Role::kAssistant || !messages_.back().content.empty())
      messages_.push_back(InputMessage::assistant(""));
    InputMessage& last = messages_.back();
    last.reasoning_content = last.reasoning_content.empty() ? text : last.reasoning_content + "\n" + text;
  }

  std::string resolve_call_name(const std::string& name, const std::optional<std::string>& ns) {
    if (!ns) return name;
    const auto key = std::make_pair(*ns, name);
    if (auto it = tools_.namespace_names.find(key); it != tools_.namespace_names.end()) return it->second;
    if (auto it = historical_names_.find(key); it != historical_names_.end()) return it->second;
    std::string flat = unique_name(*ns + "::" + name, [&](const std::string& c) {
      if (tools_.taken(c)) return true;
      for (const auto& [k, v] : historical_names_)
        if (v == c) return true;
      return false;
    });
    historical_names_[key] = flat;
    return flat;
  }

  void item(const Json& value, size_t index) {
    const std::string path = core::str_cat("input[", index, "]");
    const Json& item = expect_object(value, path);
    const Json* type_field = field(item, "type");
    const std::string type = type_field ? expect_string(*type_field, path + ".type") : "message";
    if (type == "message") {
      check_pending();
      flush();
      message(item, path);
    } else if (type == "reasoning") {
      check_pending();
      flush();
      reasoning(item, path);
    } else if (type == "function_call") {
      const std::string id = require_string(item, "call_id", path);
      const std::string name = require_string(item, "name", path);
      const std::string arguments = require_string(item, "arguments", path);
      const auto ns = opt_string(item, "namespace", path);
      check_call_id(index, id);
      pending_.add(id);
      add_call({id, resolve_call_name(name, ns), arguments});
    } else if (type == "custom_tool_call") {
      const std::string id = require_string(item, "call_id", path);
      const std::string name = require_string(item, "name", path);
      Json arguments = Json::object();
      arguments["input"] = require_string(item, "input", path);
      check_call_id(index, id);
      pending_.add(id);
      add_call({id, name, to_compact_json(arguments)});
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      const std::string id = require_string(item, "call_id", path);
      const Json* output = field(item, "output");
      if (output == nullptr && type == "function_call_output") require_field(item, "output", path);
      check_output_id(index, id);
      std::pair<std::string, std::vector<ImageSource>> result;
      if (output) result = read_content(*output, path + ".output", false);
      add_output(id, std::move(result));
    }
    // Other item types (web_search_call, ...) are ignored.
  }

  std::vector<InputMessage>& messages_;
  const ToolSet& tools_;
  CallIds pending_, resolved_;
  std::optional<PendingGroup> group_;
  std::map<std::pair<std::string, std::string>, std::string> historical_names_;
};

bool input_has_placeholder(const Json* input) {
  if (input == nullptr) return false;
  if (input->is_string()) return contains_image_placeholder(input->get_ref<const std::string&>());
  if (!input->is_array()) return false;
  for (const auto& item : *input) {
    if (!item.is_object()) continue;
    const Json* type = field(item, "type");
    const std::string t = type && type->is_string() ? type->get<std::string>() : "message";
    if (t == "message") {
      if (const Json* c = field(item, "content"); c && text_has_placeholder(*c, true)) return true;
    } else if (t == "function_call_output" || t == "custom_tool_call_output") {
      if (const Json* o = field(item, "output"); o && text_has_placeholder(*o, false)) return true;
    } else if (t == "reasoning") {
      if (const Json* c = field(item, "content"); c && c->is_array())
        for (const auto& block : *c)
          if (const Json* text = field(block, "text");
              text && text->is_string() && contains_image_placeholder(text->get_ref<const std::string&>()))
            return true;
    }
  }
  return false;
}

std::optional<ReasoningEffort> responses_effort(const std::string& effort) {
  if (effort == "minimal" || effort == "low") return ReasoningEffort::kLow;
  if (effort == "medium" || effort == "high") return ReasoningEffort::kHigh;
  if (effort == "xhigh") return ReasoningEffort::kXhigh;
  if (effort == "max") return ReasoningEffort::kMax;
  return std::nullopt;
}

}  // namespace

ConvertedRequest convert_responses(const Json& body, const ConversionOptions& options) {
  expect_object(body, "", "struct ResponsesRequest");
  const std::string model = require_string(body, "model", "");
  const Json* input = field(body, "input");
  if (input && !input->is_string()) expect_array(*input, "input");
  const auto instructions = opt_string(body, "instructions", "");
  std::optional<std::string> effort_text;
  if (const Json* reasoning = field(body, "reasoning")) {
    expect_object(*reasoning, "reasoning");
    if (auto e = opt_string(*reasoning, "effort", "reasoning"))
      effort_text = expect_variant(*e, {"none", "minimal", "low", "medium", "high", "xhigh", "max"}, "reasoning.effort");
  }
  const auto max_output_tokens = opt_u32(body, "max_output_tokens", "");
  const auto temperature = opt_f32(body, "temperature", "");
  const auto top_p = opt_f32(body, "top_p", "");
  const auto stream = opt_bool(body, "stream", "");
  std::string format = "text";
  if (const Json* text = field(body, "text")) {
    expect_object(*text, "text");
    if (const Json* f = field(*text, "format")) {
      expect_object(*f, "text.format");
      format = expect_variant(require_string(*f, "type", "text.format"), {"text", "json_object", "json_schema"},
                              "text.format.type");
    }
  }
  std::optional<std::string> choice_mode, choice_type, choice_name;
  if (const Json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      choice_mode = expect_variant(c->get<std::string>(), {"none", "auto", "required"}, "tool_choice");
    } else {
      expect_object(*c, "tool_choice");
      choice_type = require_string(*c, "type", "tool_choice");
      if (!is_web_search(*choice_type)) {
        expect_variant(*choice_type, {"function", "custom", "web_search", "web_search_2025_08_26"}, "tool_choice.type");
        choice_name = require_string(*c, "name", "tool_choice");
      }
    }
  }

  ConvertedRequest out;
  out.protocol = Protocol::kResponses;
  if (const Json* tools = field(body, "tools"); tools && tools->is_array()) {
    std::set<std::string> seen;
    for (const auto& tool : *tools) {
      const Json* type = field(tool, "type");
      const Json* name = field(tool, "name");
      if (type && *type == "custom" && name && name->is_string() && seen.insert(name->get<std::string>()).second)
        out.custom_tool_names.push_back(name->get<std::string>());
    }
  }

  if ((instructions && contains_image_placeholder(*instructions)) || input_has_placeholder(input))
    image_placeholder_not_allowed();
  bool thinking = options.default_thinking_mode;
  std::optional<ReasoningEffort> effort;
  if (effort_text) thinking = *effort_text != "none";
  if (thinking) effort = effort_text ? responses_effort(*effort_text).value_or(ReasoningEffort::kHigh) : ReasoningEffort::kHigh;
  validate_max_tokens(max_output_tokens, "max_output_tokens");
  validate_sampling(temperature, top_p);
  const ToolSet tool_set = convert_tools(field(body, "tools"), options);

  std::vector<InputMessage> messages;
  if (instructions && !instructions->empty()) messages.push_back(InputMessage::system(*instructions));
  if (input == nullptr) {
    if (messages.empty()) bad_request("Either input or instructions must be provided");
  } else if (input->is_string()) {
    messages.push_back(InputMessage::user(input->get<std::string>()));
  } else {
    ItemTransformer(messages, tool_set).run(*input);
  }

  // Tool selection.
  if (choice_type && is_web_search(*choice_type)) {
    if (options.responses_web_search == WebSearchBehavior::kReject) bad_request("Server tools are not supported");
    choice_type.reset();
  }
  std::vector<ToolDefinition> definitions;
  ToolChoice tool_choice = ToolChoice::kAuto;
  if (choice_mode && *choice_mode == "none") {
    tool_choice = ToolChoice::kNone;
  } else if (!tool_set.definitions.empty()) {
    std::set<std::string> names;
    for (const auto& f : tool_set.definitions) {
      if (!names.insert(f.name).second) bad_request("Tool names must be unique");
      ToolDefinition def;
      def.name = f.name;
      def.description = f.description;
      def.strict = f.strict;
      if (f.parameters) {
        validate_tool_parameters(*f.parameters, core::str_cat("Tool '", f.name, "' parameters"));
        def.parameters = *f.parameters;
      }
      definitions.push_back(std::move(def));
    }
    bool required = false;
    if (choice_type && choice_name) {
      if (!names.count(*choice_name)) bad_request("tool_choice: no tool named '", *choice_name, "' was specified");
      std::vector<ToolDefinition> kept;
      for (auto& d : definitions)
        if (d.name == *choice_name) kept.push_back(std::move(d));
      definitions = std::move(kept);
      required = true;
    } else if (choice_mode && *choice_mode == "required") {
      required = true;
    }
    if (required && thinking) bad_request("Thinking mode does not support this tool_choice");
    if (required) tool_choice = ToolChoice::kRequired;
  }
  validate_tool_text(definitions, messages);
  ResponseFormat response_format = ResponseFormat::kText;
  if (format == "json_object") {
    if (!contains_json_instruction(messages))
      bad_request("Response input messages must contain the word 'json' to use text.format of type json_object");
    response_format = ResponseFormat::kJsonObject;
  }

  ConversationRequest& r = out.request;
  r.model = model;
  r.stream = stream.value_or(false);
  r.conversation.messages = std::move(messages);
  r.conversation.thinking_mode = thinking;
  r.conversation.tools = std::move(definitions);
  r.conversation.tool_choice = tool_choice;
  r.conversation.reasoning_effort = effort;
  r.conversation.response_format = response_format;
  r.inference_options.max_tokens = max_output_tokens;
  r.inference_options.temperature = temperature;
  r.inference_options.top_p = top_p;
  ParsingOptions& p = r.parsing_options;
  p.parse_tool_calls = !r.conversation.tools.empty();
  p.tool_call_initial_stage = tool_choice == ToolChoice::kRequired;
  p.parse_json_output = response_format == ResponseFormat::kJsonObject;
  if (thinking) p.reasoning_initial_stage = ReasoningStage::kStart;
  return out;
}

}  // namespace dsinfer::recipe
