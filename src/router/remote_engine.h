// RemoteEngine: an engine::Engine that serves every request through a disaggregated cluster, so the
// server layer (rendering, tokenization, protocols) runs unchanged in the router process. For each
// request: the decode balancer picks a decode worker at submit (none has room: kQueueFull, the server's
// 429), the request waits in the prefill balancer's length bucket until a prefill worker has quota for it,
// the prefill worker computes the prompt and the first token and hands the state to the decode worker over
// UCX, and the decode worker's NDJSON stream becomes TokenEvents. The router owns the request until its
// last token: a prefill worker that fails before answering, or a decode worker that fails at any point, is
// dropped from the pool and the request is re-submitted as prompt + tokens generated so far to a healthy
// pair, continuing the same event stream (README.md "Failover").
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "router/decode_balancer.h"
#include "router/prefill_balancer.h"
#include "router/worker_protocol.h"
#include "router/worker_registry.h"

namespace dsinfer::router {

class HttpCall;

struct RemoteEngineOptions {
  int64_t max_context = 0;   // from the model's config.json
  int32_t eos_token_id = -1;
  std::string api_key;       // sent to the workers' /internal routes
  std::chrono::milliseconds lease{3000};
  PrefillBalancerConfig prefill;
  double count_weight = 0.5;  // decode balancer
  // Prompt tokens a prefill worker may have in flight from this router (its compute quota); a worker
  // also never has more prefills than its max_running.
  int64_t prefill_quota_tokens = 16384;
  // Admission reserves prompt + max_tokens of decode KV, with max_tokens counted up to this many (a
  // request that asks for the whole context would otherwise never fit; the worker's engine preempts if
  // its KV really runs out).
  int64_t reserve_output_tokens = 32768;
  int max_failovers = 4;  // re-submissions per request before it fails
  // A request waiting this long for a prefill worker (none live, all busy) fails.
  std::chrono::milliseconds queue_timeout{60000};
  // A worker call with no progress this long (no prefill answer; no decode line) counts as the worker
  // failing: the call is cut, the request re-submitted elsewhere, and the worker leaves the pool for as
  // long again (its heartbeats alone do not show that its engine runs). 0: off. Must exceed the longest
  // prefill a worker may take, queueing included.
  std::chrono::milliseconds progress_timeout{300000};
  int32_t max_queue = 4096;
};

// What the router's /metrics shows (read at scrape time).
struct RouterStats {
  struct Worker {
    std::string id;
    bool prefill = true;
    bool live = false;
    int64_t running = 0, waiting = 0, kv_tokens_used = 0, kv_tokens = 0;  // its last heartbeat
    int64_t routed_in_flight = 0;  // this router's requests on it now
  };
  std::vector<Worker> workers;
  std::vector<int64_t> bucket_queued;  // prefill queue per length bucket
  std::vector<int64_t> bucket_bounds;
  double decode_request_imbalance = 1, decode_kv_imbalance = 1, prefill_imbalance = 1;
  int64_t failovers_total = 0;
  int64_t handoffs_total = 0, handoff_bytes_total = 0;
  double handoff_seconds_total = 0;  // prefill reply -> first decode line
  int64_t requests_total = 0, rejected_full_total = 0;
  int64_t stalls_total = 0;  // worker calls cut for no progress within progress_timeout
};

class RemoteEngine final : public engine::Engine {
 public:
  explicit RemoteEngine(RemoteEngineOptions options);
  ~RemoteEngine() override;

  engine::SubmitResult submit(engine::RequestSpec spec, engine::TokenCallback on_event) override;
  void cancel(engine::RequestId id) override;
  engine::EngineMetrics metrics() const override;
  int64_t max_context() const override { return options_.max_context; }
  int32_t eos_token_id() const override { return options_.eos_token_id; }
  void shutdown(bool drain) override;

  // POST /internal/v1/workers/heartbeat: the reply body; fails with core::Error on a malformed one.
  std::string heartbeat(const std::string& body);
  // Live workers by role: {"prefill": n, "decode": m, "workers": [...]} (GET /internal/v1/workers).
  std::string workers_json() const;
  RouterStats stats() const;

  struct Request;  // remote_engine.cpp

 private:
  struct WorkerState {
    Heartbeat last;
    bool live = false;
    int64_t prefill_tokens_in_flight = 0;
    int64_t prefills_in_flight = 0;
    int64_t routed_in_flight = 0;
    size_t decode_index = 0;  // in decode_ (decode workers)
    bool in_decode_balancer = false;
    int64_t held_until_ns = 0;  // stalled (progress_timeout): its heartbeats do not rejoin it before this
    // This router's prefills on it when its last heartbeat came (prefill_room).
    int64_t prefills_at_heartbeat = 0, prefill_tokens_at_heartbeat = 0;
  };

  enum class Attempt { kDone, kRetry };
  void run(const std::shared_ptr<Request>& r);  // on the request's own thread
  Attempt attempt(Request& r);                  // one prefill + decode; kRetry: re-submit (or cancelled)
  bool attach(Request& r, HttpCall* call);      // false: cancelled
  void emit(Request& r, engine::TokenEvent ev);
  void finish(Request& r, engine::FinishReason reason, std::string error, int32_t matched_stop);
  bool place_decode_locked(Request& r);
  void release_decode_locked(Request& r);
  void release_prefill_locked(Request& r);
  void pump_locked(int64_t now_ns);
  void drop_worker_locked(const std::string& id, const std::string& why);
  void watchdog();
  int64_t now_ns() const;

  const RemoteEngineOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  WorkerRegistry registry_;
  PrefillBalancer prefill_;
  DecodeBalancer decode_;
  std::map<std::string, WorkerState> workers_;
  std::vector<std::string> decode_ids_;  // decode_ index -> worker id
  std::unordered_map<engine::RequestId, std::shared_ptr<Request>> requests_;
  engine::RequestId next_id_ = 1;
  uint64_t next_transfer_ = 1;
  bool stopping_ = false;
  int64_t active_threads_ = 0;  // request threads still running (detached; shutdown() waits for them)
  bool watchdog_stop_ = false;
  std::thread watchdog_;
  std::atomic<int64_t> failovers_{0}, handoffs_{0}, handoff_bytes_{0}, requests_total_{0}, rejected_full_{0};
  std::atomic<int64_t> stalls_{0};
  std::atomic<int64_t> handoff_ns_{0};
  std::atomic<int64_t> generated_total_{0}, prompt_total_{0}, cached_total_{0};
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace dsinfer::router
