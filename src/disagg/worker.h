// A disaggregated worker (`dsinfer serve --role prefill|decode`, README.md "Roles and protocol"): the
// /internal/v1/ routes over the process's engine, one UCX Transport driven by one handoff thread, and
// the heartbeats that keep its lease with the router.
//   prefill: /internal/v1/prefill runs a request to its first token (RequestSpec::export_state) and
//            answers; the sequence's state then waits, exposed, for the decode worker to pull it
//            (unclaimed past the handoff timeout: freed and counted).
//   decode:  /internal/v1/decode claims the state of a transfer, imports it (RequestSpec::imported_state)
//            and streams the tokens as NDJSON.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "disagg/ucx_transport.h"
#include "engine/engine.h"

namespace dsinfer::server {
class Exchange;
class PromWriter;
}

namespace dsinfer::disagg {

enum class WorkerRole { kPrefill, kDecode };
const char* role_name(WorkerRole role);

struct WorkerOptions {
  WorkerRole role = WorkerRole::kPrefill;
  std::string router_url;      // http://host:port of the router; empty: no heartbeats
  std::string advertise_host;  // the host in this worker's "url" (how the router reaches it)
  uint16_t http_port = 0;      // the port this process's HTTP server listens on
  std::string api_key;         // sent to the router with each heartbeat (its --api-key)
  TransportOptions transport;
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds handoff_timeout{30000};  // a state unclaimed this long is freed; a claim gives up
  // Capacity reported in heartbeats.
  int64_t max_running = 0;
  int64_t kv_tokens = 0;        // KV budget in tokens (budget / bytes per block * block tokens)
  int64_t kv_bytes_per_token = 1;
  // Structured output: builds a fresh constraint from a TokenConstraint::source() text (throws on a bad
  // one). Null: requests with a constraint are refused (400).
  std::function<std::shared_ptr<engine::TokenConstraint>(const std::string&)> make_constraint;
};

class Worker {
 public:
  // Starts the handoff thread (the Transport is made there; throws if UCX cannot start) and the
  // heartbeats. The engine must outlive the worker.
  Worker(WorkerOptions options, engine::Engine& engine);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves a request under /internal/ (authentication already checked by the caller).
  void handle(const std::shared_ptr<server::Exchange>& ex);
  // The Transport's address, as peers and the router are told.
  const std::string& ucx_address() const;
  std::string id() const;
  // The worker's handoff and heartbeat counters, for /metrics.
  void write_metrics(server::PromWriter& w) const;
  // Stops heartbeats and the handoff thread (pending claims fail, exposed states are freed).
  void stop();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace dsinfer::disagg
