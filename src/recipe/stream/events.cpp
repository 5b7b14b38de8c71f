#include "recipe/stream/events.h"

namespace dsinfer::recipe::stream {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kContentFilter: return "content_filter";
    case FinishReason::kStopSequence: return "stop_sequence";
    case FinishReason::kEndOfStream: return "end_of_stream";
  }
  return "stop";
}

std::string sse_frame(const StreamEvent& event) {
  std::string out;
  if (!event.name.empty()) out += "event: " + event.name + "\n";
  out += "data: " + to_compact_json(event.data) + "\n\n";
  return out;
}

std::string sse_done_frame() { return "data: [DONE]\n\n"; }

}  // namespace dsinfer::recipe::stream
