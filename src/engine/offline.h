// Offline generation over an Engine (what `dsinfer generate` runs): many requests with at most N in
// flight, results handed out in input order as soon as each is ready; and the JSONL request/result
// lines of `dsinfer generate --prompts`.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace dsinfer::engine {

struct OfflineResult {
  std::vector<int32_t> output_ids;  // ends with the stop token when the request stopped on one
  FinishReason finish = FinishReason::kNone;
  int64_t cached_tokens = 0;
  std::string error;
};

struct OfflineCallbacks {
  // Results in input order (index, result), each as soon as it and all before it are done.
  std::function<void(size_t, const OfflineResult&)> on_result;
  // Tokens as they are generated (index, new tokens); optional. Called on an engine thread.
  std::function<void(size_t, std::span<const int32_t>)> on_tokens;
};

// Submits `specs` keeping at most `max_concurrency` in flight and returns when all are done. A request
// the engine refuses gets finish kError with the refusal's message.
void generate_offline(Engine& engine, std::span<const RequestSpec> specs, int64_t max_concurrency,
                      const OfflineCallbacks& callbacks);

const char* finish_reason_name(FinishReason f);

// One `--prompts` line: {"prompt_ids": [...] | "prompt": "text", "max_tokens", "temperature", "top_p",
// "top_k", "min_p", "seed", "stop_token_ids", "ignore_eos"}; absent fields come from `defaults`.
// `tokenize` turns a "prompt" text into ids (it may throw). Errors name `where` and the field.
struct OfflineRequest {
  RequestSpec spec;
  bool text = false;  // the prompt was given as text
};
OfflineRequest parse_offline_request(const std::string& line, const std::string& where, const RequestSpec& defaults,
                                     const std::function<std::vector<int32_t>(const std::string&)>& tokenize);

// {"output_ids": [...], "finish_reason": "...", "cached_tokens": n} (+ "text" when given, + "error").
std::string format_offline_result(const OfflineResult& r, const std::string* text = nullptr);

}  // namespace dsinfer::engine
