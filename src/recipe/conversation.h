// The protocol-neutral request the three API conversions produce and the prompt encoders consume
// (deepseek-recipe's Conversation / ConversationRequest). Images are already replaced by the placeholder
// text <｜image｜> inside message content, with one ImageSource per placeholder, in order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recipe/json_text.h"

namespace dsinfer::recipe {

inline constexpr const char* kImagePlaceholder = "<\xEF\xBD\x9Cimage\xEF\xBD\x9C>";  // <｜image｜>
// The image token's id (model-v41.md `image_token_id`) and its spelling in the released V4.1
// tokenizer.json, where the recipe's <｜image｜> is not a token (recipe.md §9 item 4).
inline constexpr int32_t kImageTokenId = 129264;
inline constexpr const char* kReleasedV41ImagePlaceholder = "<\xEF\xBD\x9C" "deepseek_image\xEF\xBD\x9C>";

enum class ImageDetail { kLow, kHigh, kOriginal, kAuto };

struct ImageSource {
  enum class Kind { kUrl, kDataUrl, kBytes };
  Kind kind = Kind::kUrl;
  std::string value;  // the URL, the data URL, or the raw bytes
  ImageDetail detail = ImageDetail::kHigh;

  static ImageSource url(std::string u, ImageDetail d) { return {Kind::kUrl, std::move(u), d}; }
  static ImageSource data_url(std::string u, ImageDetail d) { return {Kind::kDataUrl, std::move(u), d}; }
};

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text as the client sent it (usually an object)
};

enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };

struct InputMessage {
  Role role = Role::kUser;
  std::string content;
  std::vector<ImageSource> images;  // user and tool messages
  std::string reasoning_content;    // assistant; empty means none
  std::vector<ToolCall> tool_calls;  // assistant; empty means none
  std::string tool_call_id;         // tool
  // 0.2.0 Chat prefix continuation: the last assistant message is continued, not closed.
  bool prefix = false;

  static InputMessage system(std::string content);
  static InputMessage user(std::string content, std::vector<ImageSource> images = {});
  static InputMessage assistant(std::string content, std::string reasoning = {}, std::vector<ToolCall> calls = {});
  static InputMessage tool(std::string content, std::vector<ImageSource> images, std::string tool_call_id);
  static InputMessage latest_reminder(std::string content);
};

struct ToolDefinition {
  std::string name;
  std::optional<std::string> description;
  Json parameters = Json::object();  // key order as the client sent it
  std::optional<bool> strict;
};

enum class ToolChoice { kAuto, kNone, kRequired };
enum class ReasoningEffort { kLow, kHigh, kXhigh, kMax };
enum class ResponseFormat { kText, kJsonObject };

struct Conversation {
  std::vector<InputMessage> messages;
  bool thinking_mode = true;
  std::vector<ToolDefinition> tools;
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::optional<ReasoningEffort> reasoning_effort;
  ResponseFormat response_format = ResponseFormat::kText;
};

// Passed through to the backend; the recipe fills in no defaults except through resolve_max_tokens().
struct InferenceOptions {
  std::optional<uint32_t> max_tokens;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<uint64_t> thinking_budget_tokens;
  std::optional<bool> disable_parallel_tool_use;
};

// Where output parsing starts: Start drops leading newlines of the reasoning; Reasoning and Content
// continue a prefix (0.2.0) and keep them.
enum class ReasoningStage { kStart, kReasoning, kContent };

struct ParsingOptions {
  bool parse_tool_calls = true;
  bool tool_call_initial_stage = false;  // the prompt already opened the DSML block (tool_choice required)
  bool parse_json_output = false;
  std::optional<ReasoningStage> reasoning_initial_stage;
  std::vector<std::string> stop_sequences;  // empty strings are ignored by the parser
};

// Defaults of 0.2.0 resolve_max_tokens when the request names no limit.
inline constexpr uint32_t kDefaultMaxTokens = 8192;
inline constexpr uint32_t kDefaultMaxTokensThinking = 65536;

struct ConversationRequest {
  Conversation conversation;
  InferenceOptions inference_options;
  ParsingOptions parsing_options;
  std::string model;
  bool stream = false;

  // 0.2.0: the completion budget once the prompt length is known. Without max_tokens it is 8192
  // (65536 in thinking mode), capped at what the context leaves; an explicit max_tokens that does not
  // fit, or a prompt that fills the context, is a bad request. context_limit <= 0 means unlimited.
  uint32_t resolve_max_tokens(int64_t prompt_tokens, int64_t context_limit) const;
};

// Golden/debug dumps (the shapes of rust.jsonl's convert results).
Json to_json(const ImageSource& source);
Json to_json(const InputMessage& message);
Json to_json(const ToolDefinition& tool);
Json to_json(const Conversation& conversation);
Json to_json(const InferenceOptions& options);
Json to_json(const ParsingOptions& options);
Json to_json(const ConversationRequest& request);

const char* to_string(ImageDetail detail);
const char* to_string(ToolChoice choice);
const char* to_string(ReasoningEffort effort);
const char* to_string(ResponseFormat format);
const char* to_string(ReasoningStage stage);
const char* to_string(Role role);

}  // namespace dsinfer::recipe
