// The serving engine's public face: submit requests with their own sampling and stop options, receive
// their tokens as they are produced, cancel at any time, read metrics. Protocol-agnostic: the server and the
// offline `generate` command both sit on this. (The lead fixed this contract so the server could be built
// in parallel; extend it, but keep these signatures.)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dsinfer::engine {

using RequestId = uint64_t;

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  uint64_t seed = 0;  // with the request's position: a counter-based stream, independent of batching
};

struct RequestSpec {
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // in addition to EOS unless ignore_eos
  bool ignore_eos = false;
  std::string traffic_class = "default";  // for cache TTLs and metrics
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

struct TokenEvent {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // new tokens since the last event (may be several with speculation)
  FinishReason finish = FinishReason::kNone;  // != kNone on the last event of a request
  int32_t matched_stop_token = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (prompt_cache_hit_tokens)
  std::string error;  // with kError
};

// Called on an engine thread; must be quick and must not call back into the engine synchronously
// except cancel().
using TokenCallback = std::function<void(const TokenEvent&)>;

enum class SubmitStatus { kAccepted, kQueueFull, kTooLong, kInvalid, kShuttingDown };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kAccepted;
  RequestId id = 0;
  std::string message;  // why, when not accepted
};

struct EngineMetrics {
  int64_t waiting = 0, running = 0, preempted_total = 0;
  int64_t kv_bytes_used = 0, kv_bytes_budget = 0;
  int64_t prompt_tokens_total = 0, cached_tokens_total = 0, generated_tokens_total = 0;
  int64_t steps_total = 0;
  double step_seconds_total = 0;
  int64_t draft_tokens_total = 0, accepted_draft_tokens_total = 0;
  std::map<std::string, double> extra;  // further gauges/counters by name
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual SubmitResult submit(RequestSpec spec, TokenCallback on_event) = 0;  // thread-safe
  virtual void cancel(RequestId id) = 0;  // thread-safe; the request ends with kCancelled, KV freed at once
  virtual EngineMetrics metrics() const = 0;  // thread-safe
  virtual int64_t max_context() const = 0;  // longest prompt + max_tokens accepted
  virtual int32_t eos_token_id() const = 0;
  // Stops admitting; with drain, finishes running requests, else cancels them. Returns when idle.
  virtual void shutdown(bool drain) = 0;
};

}  // namespace dsinfer::engine
