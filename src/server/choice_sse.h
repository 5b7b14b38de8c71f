// n > 1 streamed: the SSE frames of every choice's own stream, on one connection. Each choice's frames
// get their choices[].index; the terminator and the usage wait for the last choice, so the client sees
// one [DONE] and one usage (prompt counted once, completion tokens summed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "recipe/json_text.h"

namespace dsinfer::server {

class ChoiceSseMerger {
 public:
  // Complete "data: ...\n\n" frames of choice `index`; returns what to send now.
  std::string rewrite(std::string_view frames, size_t index);
  // After the last choice's frames: the merged usage chunk (when the streams carried usage), then [DONE].
  std::string finish() const;

 private:
  bool have_usage_ = false;
  bool have_reasoning_ = false;
  int64_t completion_tokens_ = 0;
  int64_t reasoning_tokens_ = 0;
  recipe::Json usage_chunk_;  // the last usage chunk seen, its usage replaced at the end
};

}  // namespace dsinfer::server
