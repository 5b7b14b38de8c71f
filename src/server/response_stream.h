// The seam between the engine's token events and one protocol's response: each generation route makes
// a ResponseStream that turns tokens into SSE frames (streaming) or, at the end, one JSON body. It runs
// on the connection's strand only, so it needs no locking.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "engine/engine.h"

namespace dsinfer::server {

enum class StreamEnd { kStop, kLength, kCancelled, kError };

class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  // Before any token: the prompt's usage (cached = prompt tokens served from the prefix cache).
  virtual std::string begin(int64_t prompt_tokens, int64_t cached_tokens) = 0;
  // New tokens; returns the SSE bytes they produce (empty when not streaming).
  virtual std::string tokens(std::span<const int32_t> ids) = 0;
  // The logprobs of the tokens the next tokens() call brings (only for requests that asked for them).
  virtual void logprobs(std::span<const engine::TokenLogprobs> /*per_token*/) {}
  // True once the output itself ended the response (a stop sequence, the end of a tool-call block):
  // the engine request should be cancelled and end() is not needed.
  virtual bool finished() const = 0;
  // The engine ended the request; returns the last SSE bytes (including the terminator).
  virtual std::string end(StreamEnd reason, const std::string& error_message) = 0;
  // The non-streaming body, once finished() or end() has run.
  virtual std::string body() const = 0;
  // Completion tokens counted so far, and the finish reason as the protocol spells it.
  virtual int64_t completion_tokens() const = 0;
  virtual std::string finish_reason() const = 0;
};

}  // namespace dsinfer::server
