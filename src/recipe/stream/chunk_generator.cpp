#include "recipe/stream/chunk_generator.h"

#include <ctime>

namespace dsinfer::recipe::stream {

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

std::unique_ptr<ChunkGenerator> make_chunk_generator(Protocol protocol, const GeneratorOptions& options) {
  switch (protocol) {
    case Protocol::kChatCompletions: return make_chat_generator(options);
    case Protocol::kResponses: return make_responses_generator(options);
    case Protocol::kMessages: return make_messages_generator(options);
  }
  return make_chat_generator(options);
}

GeneratorOptions generator_options_for(const ConvertedRequest& request, std::string id, std::string model) {
  GeneratorOptions o;
  o.id = std::move(id);
  o.model = std::move(model);
  o.thinking_mode = request.request.conversation.thinking_mode;
  o.include_usage = request.include_usage;
  o.custom_tool_names = request.custom_tool_names;
  return o;
}

}  // namespace dsinfer::recipe::stream
