#include "recipe/convert.h"

#include "recipe/request_reader.h"

namespace dsinfer::recipe {

ConvertedRequest convert_request(Protocol protocol, const Json& body, const ConversionOptions& options) {
  if (json_depth(body) > kMaxJsonDepth) bad_request("recursion limit exceeded");
  switch (protocol) {
    case Protocol::kChatCompletions: return convert_chat_completions(body, options);
    case Protocol::kResponses: return convert_responses(body, options);
    case Protocol::kMessages: return convert_messages(body, options);
  }
  internal_error("unknown protocol");
}

ConvertedRequest convert_request_text(Protocol protocol, std::string_view body, const ConversionOptions& options) {
  Json parsed;
  try {
    parsed = parse_json(body);
  } catch (const std::exception& e) {
    bad_request("invalid JSON body: ", e.what());
  }
  return convert_request(protocol, parsed, options);
}

std::optional<Protocol> parse_protocol(std::string_view name) {
  if (name == "chat" || name == "chat_completions" || name == "chat.completions") return Protocol::kChatCompletions;
  if (name == "responses") return Protocol::kResponses;
  if (name == "messages") return Protocol::kMessages;
  return std::nullopt;
}

const char* to_string(Protocol protocol) {
  switch (protocol) {
    case Protocol::kChatCompletions: return "chat_completions";
    case Protocol::kResponses: return "responses";
    case Protocol::kMessages: return "messages";
  }
  return "chat_completions";
}

Protocol detect_protocol(const Json& body) {
  using detail::field;
  if (!body.is_object()) return Protocol::kChatCompletions;
  if (field(body, "input") || field(body, "instructions")) return Protocol::kResponses;
  if (field(body, "system") || field(body, "stop_sequences") || field(body, "output_config") ||
      field(body, "anthropic_version"))
    return Protocol::kMessages;
  if (const Json* messages = field(body, "messages"); messages && messages->is_array()) {
    for (const auto& m : *messages) {
      const Json* content = field(m, "content");
      if (!content || !content->is_array()) continue;
      for (const auto& block : *content) {
        const Json* type = field(block, "type");
        if (type && type->is_string()) {
          const std::string& t = type->get_ref<const std::string&>();
          if (t == "tool_use" || t == "tool_result" || t == "thinking" || t == "image" || t == "document")
            return Protocol::kMessages;
        }
      }
    }
  }
  if (const Json* tools = field(body, "tools"); tools && tools->is_array() && !tools->empty()) {
    if (field((*tools)[0], "input_schema")) return Protocol::kMessages;
  }
  return Protocol::kChatCompletions;
}

}  // namespace dsinfer::recipe
