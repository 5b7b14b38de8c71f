// The threads around EngineCore: an engine thread that owns the core (admission, planning, the model
// calls, applying results, delivering events) and, with overlap scheduling, a helper thread that
// delivers events, takes submissions and plans step n+1 while the engine thread computes step n.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_core.h"
#include "engine/helper_thread.h"

namespace dsinfer::engine {
namespace {

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::shared_ptr<ModelRunner> model, const EngineOptions& options)
      : core_(std::move(model), options), nonce_(std::random_device{}()) {
    metrics_ = core_.metrics();
    // KV connector answers end the loop's idle wait, like a submission.
    core_.set_kv_wake([this] {
      std::lock_guard<std::mutex> lock(mu_);
      kv_ready_ = true;
      cv_.notify_all();
    });
    if (options.overlap_scheduling) helper_ = std::make_unique<HelperThread>();
    thread_ = std::thread([this] { run(); });
    engine_thread_id_ = thread_.get_id();  // no callback can run before the constructor returns
  }
  ~EngineImpl() override {
    if (on_engine_thread()) {
      // The loop that runs this callback would go on in freed memory: there is no safe way out.
      DSINFER_LOG_ERROR("engine: destroyed from its own token callback; destroy it from another thread");
      std::abort();
    }
    shutdown(false);
    core_.set_kv_wake(nullptr);  // before mu_ and cv_ go: answers may still arrive from a shared store
  }

  SubmitResult submit(RequestSpec spec, TokenCallback on_event) override {
    SubmitResult res = core_.check(spec);  // reads only immutable model info and options
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return {SubmitStatus::kShuttingDown, 0, "the engine is shutting down"};
    if (res.status != SubmitStatus::kAccepted) return res;
    if (static_cast<int64_t>(inbox_.size()) + in_transit_ + waiting_.load() >= core_.options().max_queue) {
      return {SubmitStatus::kQueueFull, 0,
              core::str_cat("the queue holds ", core_.options().max_queue, " waiting requests already")};
    }
    res.id = next_id_++;
    uint64_t key = spec.sampling.stream_key;
    if (!core_.options().deterministic_sampling) key ^= nonce_ * 0x9E3779B97F4A7C15ull + res.id;
    TokenStream stream(spec.sampling.seed, key);
    inbox_.push_back(std::make_unique<Request>(res.id, std::move(spec), std::move(on_event), stream));
    cv_.notify_all();
    return res;
  }

  void cancel(RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
    cv_.notify_all();
  }

  EngineMetrics metrics() const override {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    return metrics_;
  }

  int64_t max_context() const override { return core_.info().max_context; }
  int32_t eos_token_id() const override { return core_.info().eos_token_id; }

  void shutdown(bool drain) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (!drain) cancel_everything_ = true;
      cv_.notify_all();
    }
    // From a callback the loop cannot be waited for (it is running the callback): it ends by itself
    // once idle, and whoever destroys the engine (or calls shutdown() from another thread) joins it.
    if (on_engine_thread()) return;
    std::lock_guard<std::mutex> join_lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  // Moves submissions and cancellations into the core; returns whether the engine is stopping.
  bool take_inbox() {
    std::deque<std::unique_ptr<Request>> inbox;
    std::vector<RequestId> cancels;
    bool cancel_all = false, stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      inbox.swap(inbox_);
      // Taken from the inbox but not yet counted in waiting_: still queued for submit()'s limit.
      in_transit_ = static_cast<int64_t>(inbox.size());
      cancels.swap(cancels_);
      kv_ready_ = false;  // the plan that follows drains them
      cancel_all = cancel_everything_;
      stopping = stopping_;
    }
    for (auto& r : inbox) {
      if (std::string why = guarded([&] { core_.add(std::move(r)); }); !why.empty()) {
        // Never queued (out of memory): it ends here, with its own final event.
        DSINFER_LOG_ERROR("engine: request ", r->id, " could not be queued: ", why);
        TokenEvent ev;
        ev.id = r->id;
        ev.finish = FinishReason::kError;
        ev.prompt_tokens = static_cast<int64_t>(r->spec.prompt_ids.size());
        ev.error = core::str_cat("engine: the request could not be queued: ", why);
        guarded([&] { r->callback(ev); });
      }
    }
    for (RequestId id : cancels) core_.cancel(id);
    if (cancel_all) core_.cancel_all();
    {
      // Both at once, under the lock submit() reads them with: each request is counted exactly once.
      std::lock_guard<std::mutex> lock(mu_);
      waiting_.store(static_cast<int64_t>(core_.waiting()));
      in_transit_ = 0;
    }
    return stopping;
  }

  // The events are dropped one by one, so a final event's callback (and what it holds) is released as
  // soon as it has run.
  void deliver() {
    std::vector<PendingEvent> events = core_.take_events();
    for (PendingEvent& e : events) {
      if (e.callback) {
        try {
          e.callback(e.event);
        } catch (...) {
          DSINFER_LOG_WARN("engine: token callback of request ", e.event.id, " threw: ", current_exception_message());
        }
      }
      e = PendingEvent{};
    }
  }

  void publish_metrics() {
    EngineMetrics m;
    // Runs outside every phase guard: an exception here (bad_alloc) would end the process.
    if (std::string why = guarded([&] { m = core_.metrics(); }); !why.empty()) {
      DSINFER_LOG_WARN("engine: the metrics were not updated: ", why);
      return;
    }
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_ = std::move(m);
  }

  void wait_for_work(bool timed) {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !inbox_.empty() || !cancels_.empty() || stopping_ || kv_ready_; };
    if (timed) {
      cv_.wait_for(lock, std::chrono::milliseconds(1), ready);
    } else {
      cv_.wait(lock, ready);
    }
  }

  // One loop for both modes. The engine thread never sleeps between two forwards: with overlap, while
  // it runs step n the helper delivers the events of step n-1, takes new submissions and cancellations,
  // and plans step n+1 against the state projected after step n, so only apply(n) and launch(n+1) stay
  // between the forwards. Without overlap the same work runs inline before each plan.
  // A fault in any phase ends the requests it touched with kError (see EngineCore); the engine serves on.
  void run() {
    StepPlan next;
    bool have_next = false, have_last = false;
    Clock::time_point last_end;
    while (true) {
      const bool fresh = !have_next;  // planned now, not against a projection of a step in flight
      if (!have_next) {
        const bool stopping = take_inbox();
        deliver();
        if (!core_.has_work()) {
          core_.reap();  // nothing planned or in flight refers to finished requests now
          publish_metrics();
          if (stopping) break;
          have_last = false;
          wait_for_work(false);
          continue;
        }
        if (std::string why = guarded([&] { next = core_.plan(); }); !why.empty()) {
          // plan() undid itself: no request was taken. Try again shortly (it can only be bad_alloc).
          DSINFER_LOG_ERROR("engine: planning a step failed: ", why);
          wait_for_work(true);
          continue;
        }
      }
      have_next = false;
      StepPlan current = std::move(next);
      next = StepPlan{};
      if (std::string why = guarded([&] { core_.launch(current); }); !why.empty()) {
        fail_step(current, why);
        have_last = false;
        continue;
      }
      if (current.entries.empty()) {
        // A projected plan can come out empty (its requests ended in the step it was planned beside):
        // plan again at once. Only an empty fresh plan means nothing can run.
        if (fresh && !core_.resolve_stall()) wait_for_work(true);
        have_last = false;
        continue;
      }
      if (have_last) core_.add_gap_seconds(std::chrono::duration<double>(Clock::now() - last_end).count());
      std::string helper_failure;
      if (helper_) {
        helper_->start([this, &next, &helper_failure] {
          helper_failure = guarded([&] {
            deliver();
            take_inbox();
            next = core_.plan();
          });
        });
      }
      std::string failure = guarded([&] { core_.execute(current); });
      last_end = Clock::now();
      if (helper_) helper_->wait();
      if (failure.empty()) failure = guarded([&] { core_.apply(current); });
      if (!failure.empty()) fail_step(current, failure);
      if (helper_ && helper_failure.empty()) {
        have_next = true;
      } else if (helper_) {
        // Whatever it had planned was undone; the next loop plans afresh.
        DSINFER_LOG_ERROR("engine: preparing the next step failed: ", helper_failure);
        next = StepPlan{};
      }
      have_last = true;
      publish_metrics();
    }
    deliver();
    publish_metrics();
  }

  // Runs `phase`; returns why it failed, or an empty string.
  template <class F>
  static std::string guarded(F&& phase) {
    try {
      phase();
      return {};
    } catch (...) {
      std::string why = current_exception_message();
      return why.empty() ? "unknown error" : why;
    }
  }

  void fail_step(StepPlan& plan, const std::string& why) {
    DSINFER_LOG_ERROR("engine: step failed, its ", plan.entries.size(), " requests end: ", why);
    if (std::string again = guarded([&] { core_.abort(plan, core::str_cat("engine step failed: ", why)); });
        !again.empty()) {
      DSINFER_LOG_ERROR("engine: ending the requests of a failed step failed too: ", again);
    }
  }

  EngineCore core_;
  uint64_t nonce_;
  std::unique_ptr<HelperThread> helper_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> inbox_;
  std::vector<RequestId> cancels_;
  bool stopping_ = false, cancel_everything_ = false;
  bool kv_ready_ = false;  // KV connector answers arrived since the last take_inbox()
  RequestId next_id_ = 1;
  std::atomic<int64_t> waiting_{0};
  int64_t in_transit_ = 0;  // guarded by mu_

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;

  bool on_engine_thread() const {
    const auto self = std::this_thread::get_id();
    return self == engine_thread_id_ || (helper_ && self == helper_->id());
  }

  std::mutex join_mu_;
  std::thread thread_;
  std::thread::id engine_thread_id_;
};

}  // namespace

std::unique_ptr<Engine> make_engine(std::shared_ptr<ModelRunner> model, const EngineOptions& options) {
  return std::make_unique<EngineImpl>(std::move(model), options);
}

}  // namespace dsinfer::engine
