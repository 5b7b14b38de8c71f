// Protocol chunk generators (spec §5.4): they turn the processor's OutputChunks into the streaming events
// of Chat Completions, Responses or Messages, and accumulate the non-streaming response body as they go
// (the reference's XxxResponse.append(event)).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "recipe/convert.h"
#include "recipe/stream/events.h"

namespace dsinfer::recipe::stream {

class ChunkGenerator {
 public:
  virtual ~ChunkGenerator() = default;
  virtual std::vector<StreamEvent> generate(const OutputChunk& chunk) = 0;
  // The non-streaming response body: complete once the Finish chunk has been generated.
  virtual Json response() const = 0;
  // The SSE terminator after the last event ("data: [DONE]\n\n" for Chat), or "".
  virtual std::string done_frame() const { return {}; }
};

struct GeneratorOptions {
  std::string id;     // response id; tool call ids derive from it (call_{id}_{k}, toolu_{id}_{k}, ...)
  std::string model;  // the public model name echoed back
  std::optional<int64_t> created;  // unix seconds; now when unset
  bool thinking_mode = true;                    // Chat and Messages shape their first events on it
  bool include_usage = true;                    // Chat: "usage":null on every non-final chunk
  // Chat streaming, OpenAI's shape: usage only with include_usage, in a chunk of its own after the
  // finish chunk, with "choices":[]. Off: DeepSeek's (the recipe's) shape, usage on the finish chunk.
  bool separate_usage_chunk = false;
  std::vector<std::string> custom_tool_names;   // Responses: calls of these stream as custom_tool_call
  std::optional<std::string> signature;         // Messages: thinking-block signature (default: the id)
};

std::unique_ptr<ChunkGenerator> make_chat_generator(const GeneratorOptions& options);
std::unique_ptr<ChunkGenerator> make_responses_generator(const GeneratorOptions& options);
std::unique_ptr<ChunkGenerator> make_messages_generator(const GeneratorOptions& options);
std::unique_ptr<ChunkGenerator> make_chunk_generator(Protocol protocol, const GeneratorOptions& options);

// The options a converted request implies (thinking mode, include_usage, custom tool names).
GeneratorOptions generator_options_for(const ConvertedRequest& request, std::string id, std::string model);

int64_t unix_now();

}  // namespace dsinfer::recipe::stream
