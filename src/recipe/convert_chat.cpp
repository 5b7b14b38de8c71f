// OpenAI Chat Completions -> ConversationRequest (spec §3.2). The body is first read into typed fields
// (so type errors come first, as with the reference's serde schema), then converted and validated in the
// reference's order: thinking, sampling/scalars, stop/stream options, tools, messages, response format.
#include <set>

#include "recipe/convert.h"
#include "recipe/protocol_common.h"
#include "recipe/request_reader.h"

namespace dsinfer::recipe {
namespace {

using namespace detail;

struct ContentBlock {
  std::string type;
  std::string text;
  std::string image_url;
  std::optional<ImageDetail> detail;
  std::optional<std::string> file_id, file_data;
};

// A string or a list of blocks.
struct Content {
  bool is_string = true;
  std::string text;
  std::vector<ContentBlock> blocks;
};

struct ChatToolCall {
  std::string id, name, arguments;
};

struct ChatMessage {
  std::string role;
  std::optional<Content> content;
  std::optional<std::string> reasoning_content;
  std::optional<std::vector<ChatToolCall>> tool_calls;
  std::string tool_call_id;
  bool prefix = false;
};

Content read_content(const Json& value, const std::string& path) {
  Content content;
  if (value.is_string()) {
    content.text = value.get<std::string>();
    return content;
  }
  if (!value.is_array()) invalid_type(path, value, "a string or an array of content blocks");
  content.is_string = false;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string bpath = at_index(path, i);
    const Json& b = expect_object(value[i], bpath);
    ContentBlock block;
    block.type = expect_variant(require_string(b, "type", bpath), {"text", "image_url", "file"}, bpath + ".type");
    if (block.type == "text") {
      block.text = require_string(b, "text", bpath);
    } else if (block.type == "image_url") {
      const std::string ipath = bpath + ".image_url";
      const Json& image = expect_object(require_field(b, "image_url", bpath), ipath);
      block.image_url = require_string(image, "url", ipath);
      if (auto d = opt_string(image, "detail", ipath)) block.detail = parse_image_detail(*d, ipath + ".detail");
    } else {
      block.file_id = opt_string(b, "file_id", bpath);
      block.file_data = opt_string(b, "file_data", bpath);
      opt_string(b, "filename", bpath);
    }
    content.blocks.push_back(std::move(block));
  }
  return content;
}

ChatMessage read_message(const Json& value, const std::string& path) {
  const Json& m = expect_object(value, path);
  ChatMessage message;
  message.role = expect_variant(require_string(m, "role", path),
                                {"system", "user", "assistant", "tool", "latest_reminder"}, path + ".role");
  const Json* content = field(m, "content");
  if (content == nullptr && message.role != "assistant") require_field(m, "content", path);
  if (content != nullptr) message.content = read_content(*content, path + ".content");
  if (message.role == "latest_reminder" && !message.content->is_string)
    bad_request(path, ".content: invalid type: a sequence, expected a string");
  message.reasoning_content = opt_string(m, "reasoning_content", path);
  if (const Json* calls = field(m, "tool_calls")) {
    expect_array(*calls, path + ".tool_calls");
    std::vector<ChatToolCall> list;
    for (size_t i = 0; i < calls->size(); ++i) {
      const std::string cpath = at_index(path + ".tool_calls", i);
      const Json& c = expect_object((*calls)[i], cpath);
      ChatToolCall call;
      call.id = require_string(c, "id", cpath);
      const Json& function = expect_object(require_field(c, "function", cpath), cpath + ".function");
      call.name = require_string(function, "name", cpath + ".function");
      call.arguments = require_string(function, "arguments", cpath + ".function");
      list.push_back(std::move(call));
    }
    message.tool_calls = std::move(list);
  }
  if (message.role == "tool") message.tool_call_id = require_string(m, "tool_call_id", path);
  if (message.role == "assistant") message.prefix = opt_bool(m, "prefix", path).value_or(false);
  return message;
}

// Text and images of one message: blocks joined with "\n\n", one placeholder per image.
std::pair<std::string, std::vector<ImageSource>> content_with_images(const std::optional<Content>& content,
                                                                     const std::string& path) {
  if (!content) return {};
  if (content->is_string) return {content->text, {}};
  std::vector<std::string> texts;
  std::vector<ImageSource> images;
  for (size_t i = 0; i < content->blocks.size(); ++i) {
    const ContentBlock& block = content->blocks[i];
    const std::string bpath = core::str_cat(path, ".content[", i, "]");
    if (block.type == "text") {
      texts.push_back(block.text);
    } else if (block.type == "image_url") {
      images.push_back(image_url_source(block.image_url, block.detail, bpath + ".image_url.url"));
      texts.push_back(kImagePlaceholder);
    } else {
      if (block.file_id) file_id_unsupported(bpath);
      if (!block.file_data) bad_request(bpath, ": file must have file_data");
      images.push_back(ImageSource::data_url(*block.file_data, ImageDetail::kHigh));
      texts.push_back(kImagePlaceholder);
    }
  }
  return {join(texts, "\n\n"), std::move(images)};
}

std::string text_only(const std::optional<Content>& content, const std::string& path, const char* role) {
  auto [text, images] = content_with_images(content, path);
  if (!images.empty()) image_not_allowed(role);
  return text;
}

bool content_has_placeholder(const std::optional<Content>& content) {
  if (!content) return false;
  if (content->is_string) return contains_image_placeholder(content->text);
  for (const auto& block : content->blocks)
    if (block.type == "text" && contains_image_placeholder(block.text)) return true;
  return false;
}

std::vector<InputMessage> transform_messages(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) bad_request("Empty input messages");
  for (const auto& m : messages) {
    if (content_has_placeholder(m.content) ||
        (m.reasoning_content && contains_image_placeholder(*m.reasoning_content)))
      image_placeholder_not_allowed();
  }
  std::vector<InputMessage> result;
  for (size_t index = 0; index < messages.size(); ++index) {
    const ChatMessage& message = messages[index];
    const std::string path = core::str_cat("messages[", index, "]");
    if (message.role == "system") {
      std::string text = text_only(message.content, path, "system");
      if (!text.empty()) result.push_back(InputMessage::system(std::move(text)));
    } else if (message.role == "user") {
      auto [text, images] = content_with_images(message.content, path);
      result.push_back(InputMessage::user(std::move(text), std::move(images)));
    } else if (message.role == "assistant") {
      if (!message.content && !message.tool_calls)
        bad_request("Invalid assistant message: content or tool_calls must be set");
      std::string content = message.content ? text_only(message.content, path, "assistant") : std::string();
      std::vector<InputMessage> tool_results;
      std::vector<ToolCall> calls;
      if (message.tool_calls) {
        const size_t count = message.tool_calls->size();
        if (count == 0)
          bad_request("Invalid '", path,
                      ".tool_calls': empty array. Expected an array with minimum length 1, but got an empty array "
                      "instead.");
        std::set<std::string> ids;
        for (const auto& call : *message.tool_calls) {
          if (!ids.insert(call.id).second)
            bad_request("Duplicate value for 'tool_call_id' of ", call.id, " in message[", index, "]");
        }
        // N calls must be answered by the next N tool messages, each id once.
        std::set<std::string> answered;
        for (size_t k = 0; k < count; ++k) {
          ++index;
          if (index >= messages.size() || messages[index].role != "tool")
            bad_request("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                        "each 'tool_call_id'. (insufficient tool messages following tool_calls message)");
          const ChatMessage& result_message = messages[index];
          const std::string& id = result_message.tool_call_id;
          if (!ids.count(id))
            bad_request("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                        "each 'tool_call_id'. Unexpected tool_call_id: ",
                        id);
          if (!answered.insert(id).second)
            bad_request("Duplicate value for 'tool_call_id' of ", id, " in message[", index, "]");
          auto [text, images] = content_with_images(result_message.content, core::str_cat("messages[", index, "]"));
          tool_results.push_back(InputMessage::tool(std::move(text), std::move(images), id));
        }
        for (const auto& call : *message.tool_calls) calls.push_back({call.id, call.name, call.arguments});
      }
      InputMessage assistant =
          InputMessage::assistant(std::move(content), message.reasoning_content.value_or(""), std::move(calls));
      if (message.prefix) {
        if (index + 1 != messages.size()) bad_request(path, ": only the last message can have prefix set to true");
        if (!assistant.tool_calls.empty()) bad_request(path, ": a prefix assistant message cannot have tool_calls");
        assistant.prefix = true;
      }
      result.push_back(std::move(assistant));
      for (auto& r : tool_results) result.push_back(std::move(r));
    } else if (message.role == "tool") {
      bad_request("Messages with role 'tool' must be a response to a preceding message with 'tool_calls'");
    } else {
      result.push_back(InputMessage::latest_reminder(message.content->text));
    }
  }
  return result;
}

std::optional<ReasoningEffort> chat_effort(const std::string& effort) {
  if (effort == "minimal" || effort == "low") return ReasoningEffort::kLow;
  if (effort == "medium" || effort == "high") return ReasoningEffort::kHigh;
  if (effort == "xhigh") return ReasoningEffort::kXhigh;
  if (effort == "max") return ReasoningEffort::kMax;
  return std::nullopt;  // "none"
}

}  // namespace

ConvertedRequest convert_chat_completions(const Json& body, const ConversionOptions& options) {
  expect_object(body, "", "struct ChatCompletionRequest");
  // --- typed read ---
  const Json& messages_json = require_field(body, "messages", "");
  const std::string model = require_string(body, "model", "");
  expect_array(messages_json, "messages");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < messages_json.size(); ++i) messages.push_back(read_message(messages_json[i], at_index("messages", i)));
  const auto frequency_penalty = opt_f32(body, "frequency_penalty", "");
  const auto presence_penalty = opt_f32(body, "presence_penalty", "");
  const auto max_tokens_field = opt_u32(body, "max_tokens", "");
  // OpenAI's current name for the limit (the SDKs type it; max_tokens is deprecated there). The
  // recipe's schema lacks it; when both are given the newer one wins, as vLLM does.
  const auto max_completion_tokens = opt_u32(body, "max_completion_tokens", "");
  const auto max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens_field;
  const auto n = opt_u8(body, "n", "");
  const auto seed = opt_u64(body, "seed", "");
  std::optional<std::vector<std::string>> stop;
  bool stop_is_array = false;
  if (const Json* s = field(body, "stop")) {
    if (s->is_string()) {
      stop = std::vector<std::string>{s->get<std::string>()};
    } else {
      expect_array(*s, "stop");
      stop_is_array = true;
      stop.emplace();
      for (size_t i = 0; i < s->size(); ++i) stop->push_back(expect_string((*s)[i], at_index("stop", i)));
    }
  }
  const auto stream = opt_bool(body, "stream", "");
  std::optional<bool> include_usage_option;
  const bool has_stream_options = field(body, "stream_options") != nullptr;
  if (has_stream_options) {
    const Json& so = expect_object(*field(body, "stream_options"), "stream_options");
    include_usage_option = opt_bool(so, "include_usage", "stream_options");
  }
  const auto temperature = opt_f32(body, "temperature", "");
  const auto top_p = opt_f32(body, "top_p", "");
  std::string response_format = "text";
  if (const Json* rf = field(body, "response_format")) {
    expect_object(*rf, "response_format");
    response_format = expect_variant(require_string(*rf, "type", "response_format"),
                                     {"json_object", "json_schema", "regex", "text"}, "response_format.type");
  }
  struct ChatTool {
    std::string name;
    std::optional<std::string> description;
    const Json* parameters = nullptr;
    std::optional<bool> strict;
  };
  std::vector<ChatTool> tools;
  if (const Json* t = field(body, "tools")) {
    expect_array(*t, "tools");
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string tpath = core::str_cat("tools.", i);
      const Json& tool = expect_object((*t)[i], tpath);
      expect_variant(require_string(tool, "type", tpath), {"function"}, tpath + ".type");
      const Json& function = expect_object(require_field(tool, "function", tpath), tpath + ".function");
      ChatTool ct;
      ct.name = require_string(function, "name", tpath + ".function");
      ct.description = opt_string(function, "description", tpath + ".function");
      ct.parameters = field(function, "parameters");
      ct.strict = opt_bool(function, "strict", tpath + ".function");
      tools.push_back(std::move(ct));
    }
  }
  std::optional<std::string> choice_mode;
  std::optional<std::string> choice_name;
  if (const Json* c = field(body, "tool_choice")) {
    if (c->is_string()) {
      choice_mode = expect_variant(c->get<std::string>(), {"none", "auto", "required"}, "tool_choice");
    } else {
      expect_object(*c, "tool_choice");
      expect_variant(require_string(*c, "type", "tool_choice"), {"function"}, "tool_choice.type");
      const Json& function = expect_object(require_field(*c, "function", "tool_choice"), "tool_choice.function");
      choice_name = require_string(function, "name", "tool_choice.function");
    }
  }
  std::optional<std::string> effort_text;
  if (auto e = opt_string(body, "reasoning_effort", ""))
    effort_text = expect_variant(*e, {"none", "minimal", "low", "medium", "high", "xhigh", "max"}, "reasoning_effort");
  std::optional<std::string> thinking_type;
  if (const Json* th = field(body, "thinking")) {
    expect_object(*th, "thinking");
    thinking_type = expect_variant(require_string(*th, "type", "thinking"), {"enabled", "adaptive", "disabled"},
                                   "thinking.type");
    opt_u64(*th, "budget_tokens", "thinking");  // parsed, then dropped
  }
  opt_bool(body, "parallel_tool_calls", "");

  // --- thinking ---
  bool thinking = options.default_thinking_mode;
  if (thinking_type) thinking = *thinking_type != "disabled";
  else if (effort_text) thinking = *effort_text != "none";
  std::optional<ReasoningEffort> effort;
  if (thinking) effort = effort_text ? chat_effort(*effort_text).value_or(ReasoningEffort::kHigh) : ReasoningEffort::kHigh;

  // --- scalars ---
  if (n && *n != 1) bad_request("Invalid n value (currently only n = 1 is supported)");
  if (frequency_penalty && !(*frequency_penalty >= -2.0f && *frequency_penalty <= 2.0f))
    bad_request("frequency_penalty must be in [-2, 2]");
  if (presence_penalty && !(*presence_penalty >= -2.0f && *presence_penalty <= 2.0f))
    bad_request("presence_penalty must be in [-2, 2]");
  validate_max_tokens(max_tokens_field, "max_tokens");
  validate_max_tokens(max_completion_tokens, "max_completion_tokens");
  validate_sampling(temperature, top_p);
  if (seed && *seed >= (uint64_t{1} << 63)) bad_request("seed must be in [0, 2^63)");
  if (stop && stop_is_array && stop->size() > kMaxStopSequences)
    bad_request("ChatCompletionStopSequences string array too long: ", stop->size());
  const bool streaming = stream.value_or(false);
  if (has_stream_options && !streaming) bad_request("stream_options should be set along with stream = true");

  // --- tools ---
  for (size_t i = 0; i < tools.size(); ++i) validate_tool_name(tools[i].name, core::str_cat("tools.", i, ".function.name"));
  std::vector<ToolDefinition> definitions;
  ToolChoice tool_choice = ToolChoice::kAuto;
  if (choice_mode && *choice_mode == "none") {
    tool_choice = ToolChoice::kNone;
  } else if (!tools.empty()) {
    std::set<std::string> names;
    for (size_t i = 0; i < tools.size(); ++i) {
      if (!names.insert(tools[i].name).second) bad_request("Tool names must be unique");
      ToolDefinition def;
      def.name = tools[i].name;
      def.description = tools[i].description;
      def.strict = tools[i].strict;
      if (tools[i].parameters) {
        def.parameters = *tools[i].parameters;
        validate_tool_parameters(def.parameters, core::str_cat("tools.", i, ".function.parameters"));
      }
      definitions.push_back(std::move(def));
    }
    if (choice_name) {
      if (!names.count(*choice_name)) bad_request("tool_choice: no tool named '", *choice_name, "' was specified");
      std::vector<ToolDefinition> kept;
      for (auto& d : definitions)
        if (d.name == *choice_name) kept.push_back(std::move(d));
      definitions = std::move(kept);
      tool_choice = ToolChoice::kRequired;
    } else if (choice_mode && *choice_mode == "required") {
      tool_choice = ToolChoice::kRequired;
    }
    if (tool_choice == ToolChoice::kRequired && thinking) bad_request("Thinking mode does not support this tool_choice");
  }

  // --- messages ---
  std::vector<InputMessage> converted = transform_messages(messages);
  validate_tool_text(definitions, converted);
  ResponseFormat format = ResponseFormat::kText;
  if (response_format == "json_object") {
    if (!contains_json_instruction(converted))
      bad_request("Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'.");
    format = ResponseFormat::kJsonObject;
  } else if (response_format == "regex") {
    bad_request("response_format: only text and json_object are supported");
  }

  ConvertedRequest out;
  out.protocol = Protocol::kChatCompletions;
  out.include_usage = !streaming || include_usage_option.value_or(false);
  ConversationRequest& r = out.request;
  r.model = model;
  r.stream = streaming;
  r.conversation.messages = std::move(converted);
  r.conversation.thinking_mode = thinking;
  r.conversation.tools = std::move(definitions);
  r.conversation.tool_choice = tool_choice;
  r.conversation.reasoning_effort = effort;
  r.conversation.response_format = format;
  r.inference_options.max_tokens = max_tokens;
  r.inference_options.temperature = temperature;
  r.inference_options.top_p = top_p;
  ParsingOptions& p = r.parsing_options;
  p.parse_tool_calls = !r.conversation.tools.empty() && tool_choice != ToolChoice::kNone;
  p.tool_call_initial_stage = tool_choice == ToolChoice::kRequired;
  p.parse_json_output = format == ResponseFormat::kJsonObject;
  if (thinking) p.reasoning_initial_stage = ReasoningStage::kStart;
  if (stop) p.stop_sequences = *stop;
  // 0.2.0 prefix continuation: parsing resumes where the prefix stops, keeping leading newlines.
  if (!r.conversation.messages.empty() && r.conversation.messages.back().prefix) {
    if (tool_choice == ToolChoice::kRequired) bad_request("prefix continuation cannot be combined with a required tool_choice");
    const InputMessage& last = r.conversation.messages.back();
    p.reasoning_initial_stage =
        thinking && last.content.empty() ? ReasoningStage::kReasoning : ReasoningStage::kContent;
  }
  return out;
}

}  // namespace dsinfer::recipe
