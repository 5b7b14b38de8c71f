// What flows between the stream processor and the protocol chunk generators (spec §5.1, §5.3), and the
// protocol events that come out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "recipe/json_text.h"

namespace dsinfer::recipe::stream {

struct PromptUsage {
  int64_t prompt_tokens = 0;            // including the cached ones
  int64_t prompt_cache_hit_tokens = 0;  // served from the prefix cache
};

struct CompletionUsage {
  int64_t completion_tokens = 0;
};

// The resolved reason a response ended.
enum class FinishReason { kStop, kLength, kToolCalls, kContentFilter, kStopSequence, kEndOfStream };
const char* to_string(FinishReason reason);

// One parsed piece of model output, in order.
struct OutputChunk {
  enum class Kind { kStart, kRaw, kReasoning, kToolCallBegin, kToolCall, kToolArgumentsDelta, kFinish };
  Kind kind = Kind::kRaw;
  std::string text;  // kRaw / kReasoning / kToolArgumentsDelta text, kToolCall the tool name
  // kStart
  std::optional<std::string> system_fingerprint;
  PromptUsage prompt_usage;
  // kFinish
  FinishReason finish_reason = FinishReason::kStop;
  std::optional<std::string> stop_sequence;
  CompletionUsage completion_usage;
};

// One protocol event: its SSE event name (empty for Chat Completions, which sends bare data lines) and
// its JSON payload.
struct StreamEvent {
  std::string name;
  Json data;
};

// "event: NAME\n" (when named) + "data: JSON\n\n".
std::string sse_frame(const StreamEvent& event);
// "data: [DONE]\n\n" (Chat Completions' terminator).
std::string sse_done_frame();

}  // namespace dsinfer::recipe::stream
