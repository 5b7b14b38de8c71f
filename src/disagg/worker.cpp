#include "disagg/worker.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "router/http_client.h"
#include "router/worker_protocol.h"
#include "server/api_errors.h"
#include "server/http_server.h"
#include "server/metrics.h"

namespace dsinfer::disagg {

using Clock = std::chrono::steady_clock;
using Bytes = std::shared_ptr<const std::vector<uint8_t>>;

const char* role_name(WorkerRole role) { return role == WorkerRole::kPrefill ? "prefill" : "decode"; }

namespace {

void reply_error(const std::shared_ptr<server::Exchange>& ex, int status, const std::string& message) {
  ex->respond(status, "application/json",
              server::error_body(server::ErrorFlavor::kOpenAI, server::ApiError{status, message, "", "", {}}));
}

int status_for(engine::SubmitStatus s) {
  switch (s) {
    case engine::SubmitStatus::kQueueFull: return 429;
    case engine::SubmitStatus::kShuttingDown: return 503;
    default: return 400;
  }
}

}  // namespace

struct Worker::Impl : std::enable_shared_from_this<Worker::Impl> {
  // A prefill worker's state waiting for its decode worker, exposed once the thread took it up.
  struct Offer {
    uint64_t transfer = 0;
    std::string peer;
    Bytes bytes;
    Clock::time_point deadline;
    Clock::time_point started;
    bool exposed = false;
  };
  // A decode worker's wait for a transfer's state; `done` runs on the handoff thread (quick).
  struct Claim {
    uint64_t transfer = 0;
    Clock::time_point deadline;
    Clock::time_point started;
    std::function<void(Bytes, const std::string& error)> done;
  };

  WorkerOptions opt;
  engine::Engine& engine;
  std::string address;
  std::string worker_id;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Offer> new_offers;
  std::deque<Claim> new_claims;
  bool stopping = false;
  std::thread handoff_thread;
  std::thread heartbeat_thread;

  // Counters (handoff thread writes, metrics read).
  std::atomic<int64_t> offers_total{0}, offers_claimed{0}, offers_unclaimed{0}, offers_failed{0};
  std::atomic<int64_t> claims_total{0}, claims_done{0}, claims_failed{0}, claims_timed_out{0};
  std::atomic<int64_t> bytes_served{0}, bytes_claimed{0}, pending{0};
  std::atomic<double> handoff_seconds{0};
  // A decode worker's handoff latency by phase (README "Measured"): claim -> the prefill worker's
  // descriptor, descriptor -> bytes in hand, engine submit (import + first step) -> first event.
  std::atomic<double> claim_wait_seconds{0}, pull_seconds{0}, first_event_seconds{0};
  std::atomic<int64_t> heartbeats_ok{0}, heartbeats_failed{0};
  // Prompt tokens of the prefills accepted and not answered yet (heartbeats: the routers' quota).
  std::atomic<int64_t> prefill_tokens{0};

  Impl(WorkerOptions o, engine::Engine& e) : opt(std::move(o)), engine(e) {}

  void start() {
    // Shared: the thread may still be inside set_value() when get() returns here.
    auto ready = std::make_shared<std::promise<std::string>>();
    auto got = ready->get_future();
    handoff_thread = std::thread([this, ready] { handoff_loop(*ready); });
    try {
      address = got.get();
    } catch (...) {
      handoff_thread.join();
      throw;
    }
    worker_id = core::str_cat(role_name(opt.role), "-", opt.advertise_host, ":", opt.http_port, "-", ::getpid());
    if (!opt.router_url.empty()) {
      const router::HttpUrl url = router::parse_http_url(opt.router_url);  // a bad URL stops the start
      heartbeat_thread = std::thread([this, url] { heartbeat_loop(url); });
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return;
      stopping = true;
    }
    cv.notify_all();
    if (heartbeat_thread.joinable()) heartbeat_thread.join();
    if (handoff_thread.joinable()) handoff_thread.join();
  }

  // ---- the handoff thread: the only one that touches the Transport ----

  // Many handoffs are in flight at once: each waits for its next message by probing (Transport::arrived),
  // so a claim whose state comes late never holds up one whose state is here.
  void handoff_loop(std::promise<std::string>& ready) {
    std::unique_ptr<Transport> t;
    try {
      t = std::make_unique<Transport>(opt.transport);
      ready.set_value(t->address());
    } catch (...) {
      ready.set_exception(std::current_exception());
      return;
    }
    std::vector<Offer> offers;
    std::vector<Claim> claims;
    while (true) {
      {
        // Never parked: an idle worker must still progress UCX, or a peer's connection (and the descriptor
        // it sends ahead of the claim) would wait for this worker's next handoff.
        std::unique_lock<std::mutex> lock(mu);
        const bool idle = offers.empty() && claims.empty();
        cv.wait_for(lock, idle ? std::chrono::microseconds(2000) : std::chrono::microseconds(500),
                    [&] { return stopping || !new_offers.empty() || !new_claims.empty(); });
        if (stopping) break;
        while (!new_offers.empty()) {
          offers.push_back(std::move(new_offers.front()));
          new_offers.pop_front();
        }
        while (!new_claims.empty()) {
          claims.push_back(std::move(new_claims.front()));
          new_claims.pop_front();
        }
      }
      t->progress();
      const auto now = Clock::now();
      for (Offer& o : offers) {
        if (o.exposed) continue;
        try {
          const std::vector<uint8_t> descriptor = t->expose(o.transfer, *o.bytes);
          o.exposed = true;
          t->send(o.peer, FrameKind::kRkey, o.transfer, descriptor, o.deadline);
        } catch (const std::exception& e) {
          DSINFER_LOG_WARN("worker: transfer ", o.transfer, " could not be offered to ", o.peer, ": ", e.what());
          ++offers_failed;
          if (o.exposed) t->unexpose(o.transfer);
          o.bytes.reset();
        }
      }
      std::erase_if(offers, [](const Offer& o) { return o.bytes == nullptr; });
      for (Offer& o : offers) {
        bool drop = false;
        try {
          if (t->arrived(FrameKind::kDone, o.transfer)) {
            t->receive(FrameKind::kDone, o.transfer, o.deadline);
            ++offers_claimed;
            bytes_served += static_cast<int64_t>(o.bytes->size());
            handoff_seconds = handoff_seconds + std::chrono::duration<double>(Clock::now() - o.started).count();
            drop = true;
          } else if (now >= o.deadline) {
            DSINFER_LOG_WARN("worker: transfer ", o.transfer, " was not claimed within ",
                             opt.handoff_timeout.count(), " ms; its state is freed");
            ++offers_unclaimed;
            drop = true;
          }
        } catch (const std::exception& e) {
          DSINFER_LOG_WARN("worker: transfer ", o.transfer, ": ", e.what());
          ++offers_failed;
          drop = true;
        }
        if (drop) {
          t->unexpose(o.transfer);
          o.bytes.reset();
        }
      }
      std::erase_if(offers, [](const Offer& o) { return o.bytes == nullptr; });
      for (Claim& c : claims) {
        std::string error;
        Bytes got;
        try {
          if (t->arrived(FrameKind::kRkey, c.transfer)) {
            const auto seen = Clock::now();
            const std::vector<uint8_t> descriptor = t->receive(FrameKind::kRkey, c.transfer, c.deadline);
            got = std::make_shared<const std::vector<uint8_t>>(t->claim_described(c.transfer, descriptor, c.deadline));
            ++claims_done;
            bytes_claimed += static_cast<int64_t>(got->size());
            const auto now = Clock::now();
            handoff_seconds = handoff_seconds + std::chrono::duration<double>(now - c.started).count();
            claim_wait_seconds = claim_wait_seconds + std::chrono::duration<double>(seen - c.started).count();
            pull_seconds = pull_seconds + std::chrono::duration<double>(now - seen).count();
          } else if (Clock::now() >= c.deadline) {
            ++claims_timed_out;
            error = core::str_cat("the KV state of transfer ", c.transfer, " did not arrive within ",
                                  opt.handoff_timeout.count(), " ms");
          } else {
            continue;
          }
        } catch (const std::exception& e) {
          ++claims_failed;
          error = core::str_cat("the KV state of transfer ", c.transfer, " could not be pulled: ", e.what());
        }
        auto done = std::move(c.done);
        c.done = nullptr;
        try {
          done(std::move(got), error);
        } catch (const std::exception& e) {
          DSINFER_LOG_WARN("worker: transfer ", c.transfer, ": ", e.what());
        }
      }
      std::erase_if(claims, [](const Claim& c) { return c.done == nullptr; });
      pending = static_cast<int64_t>(offers.size() + claims.size());
    }
    for (Offer& o : offers) t->unexpose(o.transfer);
    for (Claim& c : claims) c.done(nullptr, "the worker is shutting down");
    std::lock_guard<std::mutex> lock(mu);
    for (Claim& c : new_claims) c.done(nullptr, "the worker is shutting down");
    new_claims.clear();
    new_offers.clear();
  }

  bool post_offer(Offer o) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return false;
      new_offers.push_back(std::move(o));
    }
    ++offers_total;
    cv.notify_all();
    return true;
  }

  bool post_claim(Claim c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return false;
      new_claims.push_back(std::move(c));
    }
    ++claims_total;
    cv.notify_all();
    return true;
  }

  // ---- heartbeats ----

  std::string heartbeat_body() const {
    const engine::EngineMetrics m = engine.metrics();
    router::Heartbeat h;
    h.id = worker_id;
    h.prefill = opt.role == WorkerRole::kPrefill;
    h.url = core::str_cat("http://",
                          opt.advertise_host.find(':') != std::string::npos ? "[" + opt.advertise_host + "]"
                                                                              : opt.advertise_host,
                          ":", opt.http_port);
    h.ucx_address = address;
    h.max_running = opt.max_running;
    h.kv_tokens = opt.kv_tokens;
    h.running = m.running;
    h.waiting = m.waiting;
    h.kv_tokens_used = m.kv_bytes_used / std::max<int64_t>(1, opt.kv_bytes_per_token);
    h.prefill_tokens = prefill_tokens.load();
    return router::heartbeat_json(h);
  }

  // A router that is down is retried every interval; the first failure and the recovery are logged.
  void heartbeat_loop(const router::HttpUrl& url) {
    bool failing = false;
    while (true) {
      std::string problem;
      try {
        const router::HttpReply r =
            router::http_exchange(url, "POST", "/internal/v1/workers/heartbeat", heartbeat_body(), opt.api_key,
                                  std::max(opt.heartbeat_interval, std::chrono::milliseconds(1000)));
        if (r.status != 200) problem = core::str_cat("HTTP ", r.status, ": ", r.body.substr(0, 200));
      } catch (const std::exception& e) {
        problem = e.what();
      }
      if (problem.empty()) {
        ++heartbeats_ok;
        if (failing) DSINFER_LOG_INFO("worker: the router at ", opt.router_url, " answers heartbeats again");
        failing = false;
      } else {
        ++heartbeats_failed;
        if (!failing) {
          DSINFER_LOG_WARN("worker: heartbeat to the router at ", opt.router_url, " failed (retrying quietly): ",
                           problem);
        }
        failing = true;
      }
      std::unique_lock<std::mutex> lock(mu);
      if (cv.wait_for(lock, opt.heartbeat_interval, [&] { return stopping; })) return;
    }
  }

  // ---- routes ----

  void handle(const std::shared_ptr<server::Exchange>& ex) {
    const server::HttpRequest& req = ex->request();
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (req.path == "/internal/v1/health") {
      if (!get) return reply_error(ex, 405, "use GET");
      bool ready;
      {
        std::lock_guard<std::mutex> lock(mu);
        ready = !stopping;
      }
      return ex->respond(ready ? 200 : 503, "application/json",
                         nlohmann::json{{"role", role_name(opt.role)}, {"ready", ready}, {"id", worker_id},
                                  {"ucx_address", address}}
                             .dump());
    }
    const bool prefill_path = req.path == "/internal/v1/prefill";
    const bool decode_path = req.path == "/internal/v1/decode";
    if (!prefill_path && !decode_path) return reply_error(ex, 404, core::str_cat("no route for ", req.method, " ", req.path));
    if (req.method != "POST") return reply_error(ex, 405, "use POST");
    if (prefill_path != (opt.role == WorkerRole::kPrefill)) {
      return reply_error(ex, 404, core::str_cat("this is a ", role_name(opt.role), " worker: no ", req.path));
    }
    router::HandoffRequest r;
    try {
      r = router::parse_handoff_request(ex->take_body(), decode_path);
      if (prefill_path) {
        DSINFER_CHECK(!r.decode_ucx_address.empty(), "field \"decode_ucx_address\" is required");
      }
    } catch (const std::exception& e) {
      return reply_error(ex, 400, e.what());
    }
    if (prefill_path) return prefill(ex, std::move(r));
    decode(ex, std::move(r));
  }

  // The request's constraint, rebuilt from its source and advanced past the output this worker did not
  // sample (the last `replayed` prompt ids: output_in_prompt, and a decode worker's first token), so the
  // matcher stands where one process's would. Empty string: the request is fine; else why it is not (400).
  std::string attach_constraint(const router::HandoffRequest& r, engine::RequestSpec& spec, size_t replayed) const {
    if (r.constraint.empty()) return {};
    if (!opt.make_constraint) return "this worker cannot build output constraints";
    try {
      spec.constraint = opt.make_constraint(r.constraint);
    } catch (const std::exception& e) {
      return core::str_cat("\"constraint\": ", e.what());
    }
    if (!spec.constraint) return "\"constraint\" names no constraint";
    const size_t from = spec.prompt_ids.size() - replayed;
    for (size_t i = from; i < spec.prompt_ids.size(); ++i) {
      if (!spec.constraint->accept(spec.prompt_ids[i]))
        return core::str_cat("output token ", spec.prompt_ids[i], " (output position ", i - from,
                             ") is outside the request's constraint");
    }
    return {};
  }

  void prefill(const std::shared_ptr<server::Exchange>& ex, router::HandoffRequest r) {
    engine::RequestSpec spec = router::to_spec(r);
    spec.export_state = true;
    if (std::string bad = attach_constraint(r, spec, static_cast<size_t>(r.output_in_prompt)); !bad.empty())
      return reply_error(ex, 400, bad);
    struct Acc {
      std::vector<int32_t> tokens;
      std::vector<engine::TokenLogprobs> logprobs;
    };
    auto acc = std::make_shared<Acc>();
    auto self = shared_from_this();
    const auto tokens = static_cast<int64_t>(spec.prompt_ids.size());
    prefill_tokens += tokens;
    auto on_event = [self, ex, acc, tokens, transfer = r.transfer,
                     peer = r.decode_ucx_address](const engine::TokenEvent& ev) {
      acc->tokens.insert(acc->tokens.end(), ev.tokens.begin(), ev.tokens.end());
      acc->logprobs.insert(acc->logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
      if (ev.finish == engine::FinishReason::kNone) return;
      self->prefill_tokens -= tokens;
      if (ev.finish == engine::FinishReason::kError) return reply_error(ex, 500, "prefill failed: " + ev.error);
      if (ev.finish == engine::FinishReason::kCancelled) return reply_error(ex, 503, "the request was cancelled");
      const bool handoff = ev.exported_state != nullptr;
      if (handoff) {
        Offer o;
        o.transfer = transfer;
        o.peer = peer;
        o.bytes = ev.exported_state;
        o.started = Clock::now();
        o.deadline = o.started + self->opt.handoff_timeout;
        if (!self->post_offer(std::move(o))) return reply_error(ex, 503, "the worker is shutting down");
      }
      router::PrefillReply reply;
      reply.first_token = acc->tokens.empty() ? ev.matched_stop_token : acc->tokens.front();
      reply.finish = handoff ? engine::FinishReason::kNone : ev.finish;
      reply.matched_stop_token = ev.matched_stop_token;
      if (!acc->logprobs.empty()) reply.logprobs = acc->logprobs.front();
      reply.prompt_tokens = ev.prompt_tokens;  // without output_in_prompt
      reply.cached_tokens = ev.cached_tokens;
      reply.state_bytes = handoff ? static_cast<int64_t>(ev.exported_state->size()) : 0;
      ex->respond(200, "application/json", router::prefill_reply_json(reply));
    };
    const engine::SubmitResult res = engine.submit(std::move(spec), std::move(on_event));
    if (res.status != engine::SubmitStatus::kAccepted) {
      prefill_tokens -= tokens;
      return reply_error(ex, status_for(res.status), res.message);
    }
    ex->on_disconnect([self, id = res.id] { self->engine.cancel(id); });
  }

  void decode(const std::shared_ptr<server::Exchange>& ex, router::HandoffRequest r) {
    engine::RequestSpec spec = router::to_spec(r);
    spec.prompt_ids.push_back(r.first_token);
    if (std::string bad = attach_constraint(r, spec, static_cast<size_t>(r.output_in_prompt) + 1); !bad.empty())
      return reply_error(ex, 400, bad);
    auto self = shared_from_this();
    Claim c;
    c.transfer = r.transfer;
    c.started = Clock::now();
    c.deadline = c.started + opt.handoff_timeout;
    // Runs on the handoff thread once the state is here (or is not coming).
    c.done = [self, ex, spec = std::move(spec)](Bytes state, const std::string& error) mutable {
      if (!state) return reply_error(ex, error.find("did not arrive") != std::string::npos ? 504 : 502, error);
      if (ex->disconnected()) return;
      spec.imported_state = std::move(state);
      struct Stream {
        std::mutex mu;
        bool started = false;
        Clock::time_point submitted = Clock::now();
      };
      auto stream = std::make_shared<Stream>();
      auto on_event = [self, ex, stream](const engine::TokenEvent& ev) {
        std::lock_guard<std::mutex> lock(stream->mu);
        if (!stream->started) {
          stream->started = true;
          self->first_event_seconds.fetch_add(std::chrono::duration<double>(Clock::now() - stream->submitted).count());
          ex->start_stream(200, "application/x-ndjson");
        }
        if (!ev.tokens.empty()) {
          router::DecodeLine d;
          d.tokens = ev.tokens;
          d.logprobs = ev.logprobs;
          ex->write(router::decode_line_json(d));
        }
        if (ev.finish != engine::FinishReason::kNone) {
          router::DecodeLine d;
          d.last = true;
          d.finish = ev.finish;
          d.matched_stop_token = ev.matched_stop_token;
          d.error = ev.error;
          ex->write(router::decode_line_json(d));
          ex->end_stream();
        }
      };
      const engine::SubmitResult res = self->engine.submit(std::move(spec), std::move(on_event));
      if (res.status != engine::SubmitStatus::kAccepted) return reply_error(ex, status_for(res.status), res.message);
      ex->on_disconnect([self, id = res.id] { self->engine.cancel(id); });
    };
    if (!post_claim(std::move(c))) reply_error(ex, 503, "the worker is shutting down");
  }

  void write_metrics(server::PromWriter& w) const {
    const char* role = role_name(opt.role);
    const server::Labels l = {{"role", role}};
    w.counter("dsinfer_handoff_offers_total", "KV states exposed for a decode worker to pull.", offers_total, l);
    w.counter("dsinfer_handoff_offers_claimed_total", "Exposed KV states the decode worker pulled.", offers_claimed, l);
    w.counter("dsinfer_handoff_offers_unclaimed_total",
              "Exposed KV states nobody claimed before the handoff timeout (freed).", offers_unclaimed, l);
    w.counter("dsinfer_handoff_offers_failed_total", "KV states that could not be offered or served.", offers_failed, l);
    w.counter("dsinfer_handoff_claims_total", "KV states asked for by decode requests.", claims_total, l);
    w.counter("dsinfer_handoff_claims_done_total", "KV states pulled and handed to the engine.", claims_done, l);
    w.counter("dsinfer_handoff_claims_failed_total", "KV state pulls that failed.", claims_failed, l);
    w.counter("dsinfer_handoff_claims_timed_out_total", "KV states that did not arrive before the handoff timeout.",
              claims_timed_out, l);
    w.counter("dsinfer_handoff_bytes_total", "KV state bytes served (prefill) or pulled (decode).",
              opt.role == WorkerRole::kPrefill ? bytes_served : bytes_claimed, l);
    w.counter("dsinfer_handoff_seconds_total", "Time from offer to kDone (prefill) or claim to data (decode).",
              handoff_seconds, l);
    w.gauge("dsinfer_handoff_pending", "Handoffs in flight on the handoff thread.", pending, l);
    if (opt.role == WorkerRole::kDecode) {
      w.counter("dsinfer_handoff_claim_wait_seconds_total",
                "Decode: time from a claim to the prefill worker's descriptor.", claim_wait_seconds, l);
      w.counter("dsinfer_handoff_pull_seconds_total", "Decode: time from the descriptor to the bytes in hand.",
                pull_seconds, l);
      w.counter("dsinfer_handoff_first_event_seconds_total",
                "Decode: time from the engine submit (import, first step) to the first event.", first_event_seconds, l);
    }
    w.counter("dsinfer_worker_heartbeats_total", "Heartbeats the router answered 200.", heartbeats_ok, l);
    w.counter("dsinfer_worker_heartbeat_failures_total", "Heartbeats that failed.", heartbeats_failed, l);
  }
};

Worker::Worker(WorkerOptions options, engine::Engine& engine)
    : impl_(std::make_shared<Impl>(std::move(options), engine)) {
  impl_->start();
}

Worker::~Worker() { stop(); }

void Worker::handle(const std::shared_ptr<server::Exchange>& ex) { impl_->handle(ex); }
const std::string& Worker::ucx_address() const { return impl_->address; }
std::string Worker::id() const { return impl_->worker_id; }
void Worker::stop() { impl_->stop(); }

void Worker::write_metrics(server::PromWriter& w) const { impl_->write_metrics(w); }

}  // namespace dsinfer::disagg
