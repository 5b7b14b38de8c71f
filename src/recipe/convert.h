// Protocol JSON -> ConversationRequest: OpenAI Chat Completions, OpenAI Responses and Anthropic Messages,
// with the field mapping, defaults, validation and error texts of deepseek-recipe (spec §3). Every
// failure throws ConversionError (400 for the client's mistakes).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"
#include "recipe/conversion_error.h"

namespace dsinfer::recipe {

enum class Protocol { kChatCompletions, kResponses, kMessages };
enum class WebSearchBehavior { kIgnore, kReject };

struct ConversionOptions {
  bool default_thinking_mode = true;
  WebSearchBehavior responses_web_search = WebSearchBehavior::kIgnore;
  WebSearchBehavior messages_web_search = WebSearchBehavior::kReject;
};

// A converted request plus what the response side needs from the original body.
struct ConvertedRequest {
  Protocol protocol = Protocol::kChatCompletions;
  ConversationRequest request;
  // Chat: whether chunks carry "usage" (null until the final chunk). True when not streaming.
  bool include_usage = true;
  // Responses: declared custom tools (apply_patch), whose calls stream as custom_tool_call items.
  std::vector<std::string> custom_tool_names;
};

ConvertedRequest convert_chat_completions(const Json& body, const ConversionOptions& options = {});
ConvertedRequest convert_responses(const Json& body, const ConversionOptions& options = {});
ConvertedRequest convert_messages(const Json& body, const ConversionOptions& options = {});
ConvertedRequest convert_request(Protocol protocol, const Json& body, const ConversionOptions& options = {});

// Parses the body text first; a JSON syntax error is a bad request.
ConvertedRequest convert_request_text(Protocol protocol, std::string_view body, const ConversionOptions& options = {});

// "chat" / "chat_completions", "responses", "messages".
std::optional<Protocol> parse_protocol(std::string_view name);
const char* to_string(Protocol protocol);
// Guess for tools without a route: Responses when the body has input/instructions, Messages when it has
// Anthropic-only fields (top-level system, stop_sequences, max_tokens with typed content blocks), else Chat.
Protocol detect_protocol(const Json& body);

}  // namespace dsinfer::recipe
