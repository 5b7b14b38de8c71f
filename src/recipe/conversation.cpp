#include "recipe/conversation.h"

#include <algorithm>

#include "recipe/conversion_error.h"

namespace dsinfer::recipe {

InputMessage InputMessage::system(std::string content) {
  InputMessage m;
  m.role = Role::kSystem;
  m.content = std::move(content);
  return m;
}

InputMessage InputMessage::user(std::string content, std::vector<ImageSource> images) {
  InputMessage m;
  m.role = Role::kUser;
  m.content = std::move(content);
  m.images = std::move(images);
  return m;
}

InputMessage InputMessage::assistant(std::string content, std::string reasoning, std::vector<ToolCall> calls) {
  InputMessage m;
  m.role = Role::kAssistant;
  m.content = std::move(content);
  m.reasoning_content = std::move(reasoning);
  m.tool_calls = std::move(calls);
  return m;
}

InputMessage InputMessage::tool(std::string content, std::vector<ImageSource> images, std::string tool_call_id) {
  InputMessage m;
  m.role = Role::kTool;
  m.content = std::move(content);
  m.images = std::move(images);
  m.tool_call_id = std::move(tool_call_id);
  return m;
}

InputMessage InputMessage::latest_reminder(std::string content) {
  InputMessage m;
  m.role = Role::kLatestReminder;
  m.content = std::move(content);
  return m;
}

uint32_t ConversationRequest::resolve_max_tokens(int64_t prompt_tokens, int64_t context_limit) const {
  const int64_t requested = inference_options.max_tokens
                                ? *inference_options.max_tokens
                                : (conversation.thinking_mode ? kDefaultMaxTokensThinking : kDefaultMaxTokens);
  if (context_limit <= 0) return static_cast<uint32_t>(requested);
  const int64_t room = context_limit - prompt_tokens;
  if (room <= 0 || (inference_options.max_tokens && requested > room)) {
    bad_request("This model's maximum context length is ", context_limit, " tokens. However, you requested ",
                prompt_tokens + requested, " tokens (", prompt_tokens, " in the messages, ", requested,
                " in the completion). Please reduce the length of the messages or completion.");
  }
  return static_cast<uint32_t>(std::min(requested, room));
}

const char* to_string(ImageDetail detail) {
  switch (detail) {
    case ImageDetail::kLow: return "low";
    case ImageDetail::kHigh: return "high";
    case ImageDetail::kOriginal: return "original";
    case ImageDetail::kAuto: return "auto";
  }
  return "high";
}

const char* to_string(ToolChoice choice) {
  switch (choice) {
    case ToolChoice::kAuto: return "auto";
    case ToolChoice::kNone: return "none";
    case ToolChoice::kRequired: return "required";
  }
  return "auto";
}

const char* to_string(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow: return "low";
    case ReasoningEffort::kHigh: return "high";
    case ReasoningEffort::kXhigh: return "xhigh";
    case ReasoningEffort::kMax: return "max";
  }
  return "high";
}

const char* to_string(ResponseFormat format) {
  return format == ResponseFormat::kJsonObject ? "json_object" : "text";
}

const char* to_string(ReasoningStage stage) {
  switch (stage) {
    case ReasoningStage::kStart: return "start";
    case ReasoningStage::kReasoning: return "reasoning";
    case ReasoningStage::kContent: return "content";
  }
  return "start";
}

const char* to_string(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
    case Role::kLatestReminder: return "latest_reminder";
  }
  return "user";
}

Json to_json(const ImageSource& source) {
  Json j = Json::object();
  switch (source.kind) {
    case ImageSource::Kind::kUrl:
      j["kind"] = "url";
      j["url"] = source.value;
      break;
    case ImageSource::Kind::kDataUrl:
      j["kind"] = "data_url";
      j["data_url"] = source.value;
      break;
    case ImageSource::Kind::kBytes:
      j["kind"] = "bytes";
      j["len"] = source.value.size();
      break;
  }
  j["detail"] = to_string(source.detail);
  return j;
}

namespace {
Json images_json(const std::vector<ImageSource>& images) {
  Json list = Json::array();
  for (const auto& image : images) list.push_back(to_json(image));
  return list;
}
}  // namespace

Json to_json(const InputMessage& message) {
  Json j = Json::object();
  j["role"] = to_string(message.role);
  j["content"] = message.content;
  switch (message.role) {
    case Role::kUser:
      j["images"] = images_json(message.images);
      break;
    case Role::kAssistant:
      j["reasoning_content"] = message.reasoning_content.empty() ? Json(nullptr) : Json(message.reasoning_content);
      if (message.tool_calls.empty()) {
        j["tool_calls"] = nullptr;
      } else {
        Json calls = Json::array();
        for (const auto& call : message.tool_calls) {
          Json c = Json::object();
          c["id"] = call.id;
          c["name"] = call.name;
          c["arguments"] = call.arguments;
          calls.push_back(std::move(c));
        }
        j["tool_calls"] = std::move(calls);
      }
      if (message.prefix) j["prefix"] = true;  // 0.2.0 only; absent from the 0.1 dump format
      break;
    case Role::kTool:
      j["tool_call_id"] = message.tool_call_id;
      j["images"] = images_json(message.images);
      break;
    case Role::kSystem:
    case Role::kLatestReminder:
      break;
  }
  return j;
}

Json to_json(const ToolDefinition& tool) {
  Json j = Json::object();
  j["name"] = tool.name;
  j["description"] = tool.description ? Json(*tool.description) : Json(nullptr);
  j["parameters"] = tool.parameters;
  j["strict"] = tool.strict ? Json(*tool.strict) : Json(nullptr);
  return j;
}

Json to_json(const Conversation& conversation) {
  Json j = Json::object();
  Json messages = Json::array();
  for (const auto& m : conversation.messages) messages.push_back(to_json(m));
  j["messages"] = std::move(messages);
  j["thinking_mode"] = conversation.thinking_mode;
  Json tools = Json::array();
  for (const auto& t : conversation.tools) tools.push_back(to_json(t));
  j["tools"] = std::move(tools);
  j["tool_choice"] = to_string(conversation.tool_choice);
  j["reasoning_effort"] =
      conversation.reasoning_effort ? Json(to_string(*conversation.reasoning_effort)) : Json(nullptr);
  j["response_format"] = to_string(conversation.response_format);
  return j;
}

namespace {
template <typename T>
Json optional_json(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}
}  // namespace

Json to_json(const InferenceOptions& options) {
  Json j = Json::object();
  j["max_tokens"] = optional_json(options.max_tokens);
  // 32-bit floats widened, as the reference prints them (0.7 -> 0.699999988079071).
  j["temperature"] = options.temperature ? Json(static_cast<double>(*options.temperature)) : Json(nullptr);
  j["top_p"] = options.top_p ? Json(static_cast<double>(*options.top_p)) : Json(nullptr);
  j["thinking_budget_tokens"] = optional_json(options.thinking_budget_tokens);
  j["disable_parallel_tool_use"] = optional_json(options.disable_parallel_tool_use);
  return j;
}

Json to_json(const ParsingOptions& options) {
  Json j = Json::object();
  j["parse_tool_calls"] = options.parse_tool_calls;
  j["tool_call_initial_stage"] = options.tool_call_initial_stage;
  j["parse_json_output"] = options.parse_json_output;
  j["reasoning_initial_stage"] =
      options.reasoning_initial_stage ? Json(to_string(*options.reasoning_initial_stage)) : Json(nullptr);
  j["stop_sequences"] = options.stop_sequences;
  return j;
}

Json to_json(const ConversationRequest& request) {
  Json j = Json::object();
  j["conversation"] = to_json(request.conversation);
  j["inference_options"] = to_json(request.inference_options);
  j["parsing_options"] = to_json(request.parsing_options);
  j["model"] = request.model;
  j["stream"] = request.stream;
  return j;
}

}  // namespace dsinfer::recipe
