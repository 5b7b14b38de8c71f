#include "router/remote_engine.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "router/http_client.h"

namespace dsinfer::router {
namespace {

using engine::FinishReason;
using engine::TokenEvent;
using Json = nlohmann::json;

// Transfer ids are < 2^56 (the disagg transport keeps the top byte for its own tags).
constexpr uint64_t kTransferMask = (uint64_t{1} << 56) - 1;
// A decode worker whose heartbeat names no KV capacity is taken to have this much.
constexpr int64_t kUnknownKvTokens = int64_t{1} << 40;
constexpr int64_t kUnknownMaxRunning = 256;

thread_local bool t_request_thread = false;

std::string error_message(const std::string& body, int status) {
  const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
        return (*e)["message"].get<std::string>();
      if (e->is_string()) return e->get<std::string>();
    }
  }
  return core::str_cat("worker answered ", status);
}

}  // namespace

enum class Phase { kQueued, kPrefill, kDecode };

struct RemoteEngine::Request {
  engine::RequestId id = 0;
  engine::RequestSpec spec;
  engine::TokenCallback on_event;
  RequestProgress progress;
  int failovers = 0;
  int64_t cached_tokens = 0;
  // Guarded by the engine's mu_:
  bool cancelled = false;
  Phase phase = Phase::kQueued;
  bool queued = false;
  std::string prefill_worker;  // assigned by pump_locked
  int64_t compute_tokens = 0;
  std::string decode_worker;  // placed on decode_ (empty: not placed)
  int64_t decode_kv = 0, decode_reserve = 0;
  HttpCall* call = nullptr;  // the call in progress: cancel() and dropped workers cut it
  int64_t progress_ns = 0;   // when the call in progress last moved (started, answered, a line came)
};

RemoteEngine::RemoteEngine(RemoteEngineOptions options)
    : options_(std::move(options)),
      registry_(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.lease).count()),
      prefill_(options_.prefill),
      decode_(options_.count_weight) {
  DSINFER_CHECK(options_.max_context > 0, "router: the model's context length is unknown");
  DSINFER_CHECK(options_.prefill_quota_tokens > 0, "router: the prefill quota must be positive");
  watchdog_ = std::thread([this] { watchdog(); });
}

RemoteEngine::~RemoteEngine() {
  shutdown(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    watchdog_stop_ = true;
    cv_.notify_all();
  }
  watchdog_.join();
}

int64_t RemoteEngine::now_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count();
}

engine::SubmitResult RemoteEngine::submit(engine::RequestSpec spec, engine::TokenCallback on_event) {
  using engine::SubmitStatus;
  // A constraint crosses to the workers as its source (they compile it there).
  if (spec.constraint && spec.constraint->source().empty())
    return {SubmitStatus::kInvalid, 0, "this output constraint cannot be sent to the cluster's workers"};
  if (spec.prompt_ids.empty()) return {SubmitStatus::kInvalid, 0, "empty prompt"};
  if (spec.max_tokens < 1) return {SubmitStatus::kInvalid, 0, "max_tokens must be at least 1"};
  const auto prompt = static_cast<int64_t>(spec.prompt_ids.size());
  if (prompt + spec.max_tokens > options_.max_context)
    return {SubmitStatus::kTooLong, 0,
            core::str_cat("prompt (", prompt, ") + max_tokens (", spec.max_tokens, ") exceeds the context of ",
                          options_.max_context, " tokens")};
  auto r = std::make_shared<Request>();
  r->spec = std::move(spec);
  r->on_event = std::move(on_event);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return {SubmitStatus::kShuttingDown, 0, "the router is shutting down"};
  if (static_cast<int64_t>(requests_.size()) >= options_.max_queue)
    return {SubmitStatus::kQueueFull, 0, core::str_cat("the router holds ", options_.max_queue, " requests already")};
  // Admission: a decode slot is reserved now, so a request that is accepted is never stranded after its
  // prefill for want of KV.
  if (!place_decode_locked(*r)) {
    ++rejected_full_;
    return {SubmitStatus::kQueueFull, 0, "every decode worker is full (or none is registered)"};
  }
  r->id = next_id_++;
  requests_.emplace(r->id, r);
  ++requests_total_;
  ++active_threads_;
  std::thread([this, r] {
    t_request_thread = true;
    run(r);
  }).detach();
  return {SubmitStatus::kAccepted, r->id, ""};
}

bool RemoteEngine::place_decode_locked(Request& r) {
  const auto kv = static_cast<int64_t>(r.spec.prompt_ids.size() + r.progress.generated.size()) + 1;
  const auto reserve = std::max<int64_t>(
      kv, static_cast<int64_t>(r.spec.prompt_ids.size()) +
              std::min<int64_t>(r.spec.max_tokens, options_.reserve_output_tokens));
  const auto idx = decode_.choose(kv, reserve);
  if (!idx) return false;
  decode_.place(*idx, kv, reserve);
  r.decode_worker = decode_ids_.at(*idx);
  r.decode_kv = kv;
  r.decode_reserve = reserve;
  ++workers_.at(r.decode_worker).routed_in_flight;
  return true;
}

void RemoteEngine::release_decode_locked(Request& r) {
  if (r.decode_worker.empty()) return;
  WorkerState& w = workers_.at(r.decode_worker);
  decode_.release(w.decode_index, r.decode_kv, r.decode_reserve);
  --w.routed_in_flight;
  r.decode_worker.clear();
}

void RemoteEngine::release_prefill_locked(Request& r) {
  if (r.prefill_worker.empty()) return;
  WorkerState& w = workers_.at(r.prefill_worker);
  w.prefill_tokens_in_flight -= r.compute_tokens;
  --w.prefills_in_flight;
  --w.routed_in_flight;
  r.prefill_worker.clear();
  pump_locked(now_ns());  // its quota is free again
}

void RemoteEngine::cancel(engine::RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& r = *it->second;
  r.cancelled = true;
  if (r.call) r.call->cancel();
  cv_.notify_all();
}

void RemoteEngine::emit(Request& r, TokenEvent ev) {
  if (ev.finish != FinishReason::kNone) {
    // The request leaves the router's books before its last event: whoever reacts to it (the server, a
    // test, a metrics scrape) sees its slots free.
    std::lock_guard<std::mutex> lock(mu_);
    release_prefill_locked(r);
    release_decode_locked(r);
    if (r.queued) prefill_.cancel(r.id);
    r.queued = false;
    requests_.erase(r.id);
  }
  ev.id = r.id;
  ev.prompt_tokens = static_cast<int64_t>(r.spec.prompt_ids.size());
  ev.cached_tokens = r.cached_tokens;
  generated_total_ += static_cast<int64_t>(ev.tokens.size());
  try {
    r.on_event(ev);
  } catch (const std::exception& e) {
    DSINFER_LOG_ERROR("router: token callback threw: ", e.what());
  }
}

void RemoteEngine::finish(Request& r, FinishReason reason, std::string error, int32_t matched_stop) {
  TokenEvent ev;
  ev.finish = reason;
  ev.error = std::move(error);
  ev.matched_stop_token = matched_stop;
  emit(r, std::move(ev));
}

void RemoteEngine::run(const std::shared_ptr<Request>& r) {
  for (;;) {
    const Attempt a = attempt(*r);
    if (a == Attempt::kDone) break;
    bool cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled = r->cancelled;
    }
    if (cancelled) {
      finish(*r, FinishReason::kCancelled, "", -1);
      break;
    }
    if (++r->failovers > options_.max_failovers) {
      finish(*r, FinishReason::kError,
             core::str_cat("the cluster failed this request ", r->failovers, " times; giving up"), -1);
      break;
    }
    ++failovers_;
    DSINFER_LOG_INFO("router: request ", r->id, " re-submitted with ", r->progress.generated.size(),
                     " tokens generated (failover ", r->failovers, ")");
  }
  std::lock_guard<std::mutex> lock(mu_);
  release_prefill_locked(*r);
  release_decode_locked(*r);
  if (r->queued) prefill_.cancel(r->id);
  requests_.erase(r->id);
  --active_threads_;
  cv_.notify_all();
}

RemoteEngine::Attempt RemoteEngine::attempt(Request& r) {
  // 1. A decode slot (the first attempt got one at submit) and a prefill worker with quota.
  std::string prefill_url, decode_url, decode_ucx, prefill_id;
  uint64_t transfer;
  {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + options_.queue_timeout;
    if (r.decode_worker.empty()) {
      cv_.wait_until(lock, deadline, [&] { return r.cancelled || place_decode_locked(r); });
      if (r.cancelled) return Attempt::kRetry;  // run() reports the cancellation
      if (r.decode_worker.empty()) {
        lock.unlock();
        finish(r, FinishReason::kError, "no decode worker with room became available", -1);
        return Attempt::kDone;
      }
    }
    const auto prompt = static_cast<int64_t>(r.spec.prompt_ids.size() + r.progress.generated.size());
    r.compute_tokens = prompt;
    prefill_.enqueue(PrefillJob{r.id, prompt, prompt, now_ns()});
    r.queued = true;
    r.phase = Phase::kQueued;
    pump_locked(now_ns());
    cv_.wait_until(lock, deadline, [&] { return r.cancelled || !r.prefill_worker.empty(); });
    if (r.prefill_worker.empty()) {
      prefill_.cancel(r.id);
      r.queued = false;
      if (r.cancelled) return Attempt::kRetry;
      lock.unlock();
      finish(r, FinishReason::kError, "no prefill worker took the request in time", -1);
      return Attempt::kDone;
    }
    prefill_id = r.prefill_worker;
    prefill_url = workers_.at(prefill_id).last.url;
    decode_url = workers_.at(r.decode_worker).last.url;
    decode_ucx = workers_.at(r.decode_worker).last.ucx_address;
    transfer = next_transfer_++ & kTransferMask;
    r.phase = Phase::kPrefill;
  }

  // 2. The prefill: the prompt and the first token; the worker then serves the state to the decode worker.
  HandoffRequest handoff = handoff_request(r.spec, r.progress, transfer);
  handoff.decode_ucx_address = decode_ucx;
  PrefillReply reply;
  std::string request_error;  // a 4xx: the request itself is wrong, no worker would take it
  {
    HttpCall call;
    if (!attach(r, &call)) return Attempt::kRetry;
    int status = 0;
    std::string body;
    std::string transport_error;
    try {
      status = call.request(parse_http_url(prefill_url), "POST", "/internal/v1/prefill",
                            handoff_request_json(handoff, /*decode=*/false), options_.api_key);
      body = call.read_all();
    } catch (const TransportError& e) {
      transport_error = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    r.call = nullptr;
    release_prefill_locked(r);
    if (!transport_error.empty()) {
      // Connection refused or cut before the answer: the worker is gone (or was dropped): another one retries.
      if (!r.cancelled) drop_worker_locked(prefill_id, transport_error);
      release_decode_locked(r);
      return Attempt::kRetry;
    }
    if (status >= 500 || status == 429) {
      DSINFER_LOG_WARN("router: prefill worker ", prefill_id, " answered ", status, ": ", error_message(body, status));
      release_decode_locked(r);
      return Attempt::kRetry;
    }
    if (status != 200) {  // the request itself is wrong: no worker would take it
      release_decode_locked(r);
      transport_error = error_message(body, status);
    } else {
      try {
        reply = parse_prefill_reply(body);
      } catch (const core::Error& e) {
        DSINFER_LOG_WARN("router: prefill worker ", prefill_id, ": ", e.what());
        release_decode_locked(r);
        return Attempt::kRetry;
      }
    }
    if (transport_error.empty() && r.progress.generated.empty())
      r.cached_tokens = std::min<int64_t>(reply.cached_tokens, reply.prompt_tokens);
    request_error = std::move(transport_error);
  }
  if (!request_error.empty()) {
    finish(r, FinishReason::kError, request_error, -1);
    return Attempt::kDone;
  }
  const auto handoff_start = std::chrono::steady_clock::now();
  if (reply.finish != FinishReason::kNone) {  // the first token ended the request: nothing to hand off
    TokenEvent ev;
    if (reply.finish != FinishReason::kStop) {
      ev.tokens = {reply.first_token};
      if (reply.logprobs) ev.logprobs = {*reply.logprobs};
      r.progress.generated.push_back(reply.first_token);
    }
    ev.finish = reply.finish;
    ev.matched_stop_token = reply.matched_stop_token;
    emit(r, std::move(ev));
    return Attempt::kDone;
  }
  {
    TokenEvent ev;
    ev.tokens = {reply.first_token};
    if (reply.logprobs) ev.logprobs = {*reply.logprobs};
    r.progress.generated.push_back(reply.first_token);
    emit(r, std::move(ev));
  }

  // 3. The decode stream, continuing from the handed-off state.
  std::string decode_id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (r.cancelled) return Attempt::kRetry;
    decode_id = r.decode_worker;
    r.phase = Phase::kDecode;
  }
  handoff.first_token = reply.first_token;
  HttpCall call;
  if (!attach(r, &call)) return Attempt::kRetry;
  std::string failure;
  bool finished = false;
  bool unreachable = false;  // the connection failed or broke: the worker is presumed dead
  try {
    const int status = call.request(parse_http_url(decode_url), "POST", "/internal/v1/decode",
                                    handoff_request_json(handoff, /*decode=*/true), options_.api_key);
    if (status != 200) {
      failure = core::str_cat("answered ", status, ": ", error_message(call.read_all(), status));
    } else {
      LineSplitter lines;
      bool first_line = true;
      std::string chunk;
      while (!finished && call.read_some(chunk)) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          r.progress_ns = now_ns();
        }
        lines.feed(chunk, [&](std::string_view line) {
          if (finished) return;
          const DecodeLine d = parse_decode_line(line);
          if (first_line) {
            first_line = false;
            ++handoffs_;
            handoff_bytes_ += reply.state_bytes;
            handoff_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                                handoff_start).count();
          }
          // An error, or a cancellation the client did not ask for (a worker shutting down), is re-submitted;
          // a client's cancellation is reported by run().
          if (d.last && (d.finish == FinishReason::kError || d.finish == FinishReason::kCancelled)) {
            failure = d.finish == FinishReason::kError ? "stream ended with an error: " + d.error
                                                        : std::string("the worker cancelled the request");
            finished = true;  // stop reading; re-submitted below
            return;
          }
          TokenEvent ev;
          ev.tokens = d.tokens;
          ev.logprobs = d.logprobs;
          r.progress.generated.insert(r.progress.generated.end(), d.tokens.begin(), d.tokens.end());
          if (!d.tokens.empty()) {
            std::lock_guard<std::mutex> lock(mu_);
            // Counted up to the reservation (reserve_output_tokens may cap it below max_tokens).
            const int64_t delta =
                std::min<int64_t>(static_cast<int64_t>(d.tokens.size()), r.decode_reserve - r.decode_kv);
            if (!r.decode_worker.empty() && delta > 0) {
              decode_.grow(workers_.at(r.decode_worker).decode_index, delta);
              r.decode_kv += delta;
            }
          }
          if (d.last) {
            ev.finish = d.finish;
            ev.matched_stop_token = d.matched_stop_token;
            ev.error = d.error;
            finished = true;
          }
          if (!ev.tokens.empty() || ev.finish != FinishReason::kNone) emit(r, std::move(ev));
        });
        chunk.clear();
      }
      if (!finished) {
        failure = "the stream ended without a finish line";
        unreachable = true;
      }
    }
  } catch (const TransportError& e) {
    failure = e.what();
    unreachable = true;
  } catch (const core::Error& e) {
    failure = e.what();
  }
  std::lock_guard<std::mutex> lock(mu_);
  r.call = nullptr;
  release_decode_locked(r);
  if (failure.empty()) return Attempt::kDone;
  if (!r.cancelled) {
    DSINFER_LOG_WARN("router: decode worker ", decode_id, " failed request ", r.id, " after ",
                     r.progress.generated.size(), " tokens: ", failure);
    // An HTTP error before the stream (the state did not arrive: 502/504) or an error line is no sign
    // that the decode worker is gone: the request is re-submitted, the worker stays.
    if (unreachable) drop_worker_locked(decode_id, failure);
  }
  return Attempt::kRetry;
}

bool RemoteEngine::attach(Request& r, HttpCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (r.cancelled) return false;
  r.call = call;
  r.progress_ns = now_ns();
  return true;
}

void RemoteEngine::pump_locked(int64_t now) {
  if (prefill_.queued() == 0) return;
  // Workers with the most quota left pull first.
  std::vector<std::tuple<int64_t, std::string, int64_t>> order;  // -tokens left, id, requests left
  for (const auto& [id, w] : workers_) {
    if (!w.live || !w.last.prefill) continue;
    PrefillWorkerLoad load;
    load.max_running = w.last.max_running;
    load.heartbeat_requests = w.last.running + w.last.waiting;
    load.heartbeat_tokens = w.last.prefill_tokens;
    load.own_requests_at_heartbeat = w.prefills_at_heartbeat;
    load.own_tokens_at_heartbeat = w.prefill_tokens_at_heartbeat;
    load.own_requests = w.prefills_in_flight;
    load.own_tokens = w.prefill_tokens_in_flight;
    const PrefillRoom room = prefill_room(load, options_.prefill_quota_tokens, kUnknownMaxRunning);
    if (room.any()) order.emplace_back(-room.tokens, id, room.requests);
  }
  std::sort(order.begin(), order.end());
  bool assigned = false;
  for (const auto& [neg_remaining, id, requests] : order) {
    for (const PrefillJob& job :
         prefill_.pull(-neg_remaining, options_.prefill_quota_tokens, now, static_cast<size_t>(requests))) {
      auto it = requests_.find(job.id);
      if (it == requests_.end()) continue;
      Request& r = *it->second;
      WorkerState& w = workers_.at(id);
      r.queued = false;
      r.prefill_worker = id;
      r.compute_tokens = job.compute_tokens;
      w.prefill_tokens_in_flight += job.compute_tokens;
      ++w.prefills_in_flight;
      ++w.routed_in_flight;
      assigned = true;
    }
  }
  if (assigned) cv_.notify_all();
}

void RemoteEngine::drop_worker_locked(const std::string& id, const std::string& why) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  WorkerState& w = it->second;
  if (w.live) DSINFER_LOG_WARN("router: worker ", id, " left the pool: ", why);
  w.live = false;
  registry_.leave(id);
  if (w.in_decode_balancer) decode_.set_accepting(w.decode_index, false);
  // Its requests' calls are cut: they are re-submitted to healthy workers.
  for (auto& [rid, r] : requests_) {
    const bool on_it = (r->phase == Phase::kPrefill && r->prefill_worker == id) ||
                       (r->phase == Phase::kDecode && r->decode_worker == id);
    if (on_it && r->call) r->call->cancel();
  }
  cv_.notify_all();
}

std::string RemoteEngine::heartbeat(const std::string& body) {
  const Heartbeat h = parse_heartbeat(body);
  std::lock_guard<std::mutex> lock(mu_);
  WorkerInfo info;
  info.id = h.id;
  info.role = h.prefill ? WorkerRole::kPrefill : WorkerRole::kDecode;
  info.address = h.url;
  WorkerState& w = workers_[h.id];
  DSINFER_CHECK(!w.live || w.last.prefill == h.prefill, "heartbeat: worker ", h.id, " changed its role");
  if (now_ns() < w.held_until_ns) {  // stalled not long ago: its heartbeats alone do not bring it back
    w.last = h;
    return Json{{"lease_ms", options_.lease.count()}}.dump();
  }
  const HeartbeatEvent event = registry_.heartbeat(info, now_ns());
  w.last = h;
  w.prefills_at_heartbeat = w.prefills_in_flight;
  w.prefill_tokens_at_heartbeat = w.prefill_tokens_in_flight;
  w.live = true;
  if (!h.prefill) {
    if (!w.in_decode_balancer) {
      w.decode_index = decode_.add_instance(h.id, h.max_running > 0 ? h.max_running : kUnknownMaxRunning,
                                            h.kv_tokens > 0 ? h.kv_tokens : kUnknownKvTokens);
      w.in_decode_balancer = true;
      if (decode_ids_.size() <= w.decode_index) decode_ids_.resize(w.decode_index + 1);
      decode_ids_[w.decode_index] = h.id;
    } else {
      decode_.set_accepting(w.decode_index, true);
    }
  }
  if (event == HeartbeatEvent::kJoined || event == HeartbeatEvent::kRejoined)
    DSINFER_LOG_INFO("router: ", h.prefill ? "prefill" : "decode", " worker ", h.id, " at ", h.url,
                     event == HeartbeatEvent::kJoined ? " joined" : " rejoined");
  pump_locked(now_ns());
  cv_.notify_all();  // a request waiting for a decode slot may find one
  return Json{{"lease_ms", options_.lease.count()}}.dump();
}

std::string RemoteEngine::workers_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  Json list = Json::array();
  int64_t prefill = 0, decode = 0;
  for (const auto& [id, w] : workers_) {
    if (!w.live) continue;
    (w.last.prefill ? prefill : decode) += 1;
    list.push_back({{"id", id}, {"role", w.last.prefill ? "prefill" : "decode"}, {"url", w.last.url}});
  }
  return Json{{"prefill", prefill}, {"decode", decode}, {"workers", std::move(list)}}.dump();
}

RouterStats RemoteEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RouterStats s;
  std::vector<double> prefill_load;
  for (const auto& [id, w] : workers_) {
    RouterStats::Worker o;
    o.id = id;
    o.prefill = w.last.prefill;
    o.live = w.live;
    o.running = w.last.running;
    o.waiting = w.last.waiting;
    o.kv_tokens_used = w.last.kv_tokens_used;
    o.kv_tokens = w.last.kv_tokens;
    o.routed_in_flight = w.routed_in_flight;
    if (w.live && w.last.prefill) prefill_load.push_back(static_cast<double>(w.prefill_tokens_in_flight));
    s.workers.push_back(std::move(o));
  }
  for (size_t b = 0; b < prefill_.bucket_count(); ++b) s.bucket_queued.push_back(static_cast<int64_t>(prefill_.queued(b)));
  s.bucket_bounds = options_.prefill.bucket_bounds;
  s.decode_request_imbalance = decode_.request_imbalance();
  s.decode_kv_imbalance = decode_.kv_imbalance();
  s.prefill_imbalance = imbalance(prefill_load);
  s.failovers_total = failovers_.load();
  s.handoffs_total = handoffs_.load();
  s.handoff_bytes_total = handoff_bytes_.load();
  s.handoff_seconds_total = static_cast<double>(handoff_ns_.load()) * 1e-9;
  s.requests_total = requests_total_.load();
  s.rejected_full_total = rejected_full_.load();
  s.stalls_total = stalls_.load();
  return s;
}

engine::EngineMetrics RemoteEngine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine::EngineMetrics m;
  m.waiting = static_cast<int64_t>(prefill_.queued());
  m.running = static_cast<int64_t>(requests_.size()) - m.waiting;
  m.generated_tokens_total = generated_total_.load();
  return m;
}

void RemoteEngine::watchdog() {
  const int64_t stall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options_.progress_timeout).count();
  std::unique_lock<std::mutex> lock(mu_);
  while (!watchdog_stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(100));
    const int64_t now = now_ns();
    for (const std::string& id : registry_.expire(now)) drop_worker_locked(id, "its lease expired");
    if (stall_ns <= 0) continue;
    // A worker that heartbeats while its engine hangs: its call makes no progress. Dropping it cuts the
    // call (and its other requests' calls); they fail over. It stays out for another stall period.
    std::vector<std::string> stalled;
    for (const auto& [rid, r] : requests_) {
      if (r->call == nullptr || r->cancelled || now - r->progress_ns < stall_ns) continue;
      const std::string& id = r->phase == Phase::kPrefill ? r->prefill_worker
                              : r->phase == Phase::kDecode ? r->decode_worker
                                                           : std::string();
      if (!id.empty()) stalled.push_back(id);
    }
    for (const std::string& id : stalled) {
      auto it = workers_.find(id);
      if (it == workers_.end() || !it->second.live) continue;
      ++stalls_;
      it->second.held_until_ns = now + stall_ns;
      drop_worker_locked(id, core::str_cat("a call made no progress for ", options_.progress_timeout.count(), " ms"));
    }
  }
}

void RemoteEngine::shutdown(bool drain) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  if (!drain) {
    for (auto& [id, r] : requests_) {
      r->cancelled = true;
      if (r->call) r->call->cancel();
    }
  }
  cv_.notify_all();
  if (t_request_thread) return;  // from a token callback: the threads end by themselves
  cv_.wait(lock, [&] { return active_threads_ == 0; });
}

}  // namespace dsinfer::router
