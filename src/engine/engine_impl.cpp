// The threads around EngineCore: a scheduler thread that owns the core (admission, planning,
// applying results, delivering events) and, with overlap scheduling, a step thread that runs the
// forward so the scheduler can plan step n+1 while step n computes.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/engine_core.h"

namespace dsinfer::engine {
namespace {

// Runs one job at a time on its own thread; start() hands it over, wait() blocks until it is done.
class HelperThread {
 public:
  HelperThread() : thread_([this] { loop(); }) {}
  ~HelperThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
      done_ = false;
    }
    cv_.notify_all();
  }
  // Returns when the job is done. A job that throws is a bug of the engine: the process ends.
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
  }
  std::thread::id id() const { return thread_.get_id(); }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || job_; });
      if (stop_) return;
      auto job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      job();
      lock.lock();
      done_ = true;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool done_ = true, stop_ = false;
  std::thread thread_;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::shared_ptr<ModelRunner> model, const EngineOptions& options)
      : core_(std::move(model), options), nonce_(std::random_device{}()) {
    metrics_ = core_.metrics();
    if (options.overlap_scheduling) helper_ = std::make_unique<HelperThread>();
    thread_ = std::thread([this] { run(); });
  }
  ~EngineImpl() override { shutdown(false); }

  SubmitResult submit(RequestSpec spec, TokenCallback on_event) override {
    SubmitResult res = core_.check(spec);  // reads only immutable model info and options
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return {SubmitStatus::kShuttingDown, 0, "the engine is shutting down"};
    if (res.status != SubmitStatus::kAccepted) return res;
    if (static_cast<int64_t>(inbox_.size()) + waiting_.load() >= core_.options().max_queue) {
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
    std::lock_guard<std::mutex> join_lock(join_mu_);
    if (thread_.joinable()) {
      const auto self = std::this_thread::get_id();
      if (self == thread_.get_id() || (helper_ && self == helper_->id())) {
        thread_.detach();  // called from a callback: the loop ends by itself
      } else {
        thread_.join();
      }
    }
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
      cancels.swap(cancels_);
      cancel_all = cancel_everything_;
      stopping = stopping_;
    }
    for (auto& r : inbox) core_.add(std::move(r));
    for (RequestId id : cancels) core_.cancel(id);
    if (cancel_all) core_.cancel_all();
    waiting_.store(static_cast<int64_t>(core_.waiting()));
    return stopping;
  }

  void deliver() {
    for (PendingEvent& e : core_.take_events()) {
      if (!e.callback) continue;
      try {
        e.callback(e.event);
      } catch (const std::exception& ex) {
        DSINFER_LOG_WARN("engine: token callback of request ", e.event.id, " threw: ", ex.what());
      }
    }
  }

  void publish_metrics() {
    EngineMetrics m = core_.metrics();
    std::lock_guard<std::mutex> lock(metrics_mu_);
    metrics_ = std::move(m);
  }

  void wait_for_work(bool timed) {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !inbox_.empty() || !cancels_.empty() || stopping_; };
    if (timed) {
      cv_.wait_for(lock, std::chrono::milliseconds(1), ready);
    } else {
      cv_.wait(lock, ready);
    }
  }

  // Runs a step inline; returns when the forward and sampling ended (apply is scheduling overhead).
  Clock::time_point execute_and_apply(StepPlan& plan) {
    Clock::time_point end;
    try {
      core_.execute(plan);
      end = Clock::now();
      core_.apply(plan);
    } catch (const std::exception& e) {
      end = Clock::now();
      DSINFER_LOG_ERROR("engine: step failed: ", e.what());
      core_.abort(plan, core::str_cat("engine step failed: ", e.what()));
    }
    return end;
  }

  void run() {
    if (helper_) {
      run_overlapped();
    } else {
      run_sequential();
    }
    deliver();
    publish_metrics();
  }

  void run_sequential() {
    bool have_last = false;
    Clock::time_point last_end;
    while (true) {
      const bool stopping = take_inbox();
      deliver();
      if (!core_.has_work()) {
        publish_metrics();
        if (stopping) return;
        have_last = false;
        wait_for_work(false);
        continue;
      }
      StepPlan plan = core_.plan();
      core_.launch(plan);
      if (plan.entries.empty()) {
        if (!core_.resolve_stall()) wait_for_work(true);
        deliver();
        publish_metrics();
        have_last = false;
        continue;
      }
      if (have_last) core_.add_gap_seconds(std::chrono::duration<double>(Clock::now() - last_end).count());
      last_end = execute_and_apply(plan);
      have_last = true;
      publish_metrics();
    }
  }

  // The engine thread never sleeps between two forwards: while it runs step n, the helper delivers
  // the events of step n-1, takes new submissions and cancellations, and plans step n+1 against the
  // state projected after step n. Only apply(n) and launch(n+1) stay between the forwards.
  void run_overlapped() {
    StepPlan current, next;
    bool have_next = false, have_last = false;
    Clock::time_point last_end;
    while (true) {
      const bool fresh = !have_next;  // planned now, not against a projection of a step in flight
      if (!have_next) {
        const bool stopping = take_inbox();
        deliver();
        if (!core_.has_work()) {
          publish_metrics();
          if (stopping) return;
          have_last = false;
          wait_for_work(false);
          continue;
        }
        next = core_.plan();
      }
      have_next = false;
      core_.launch(next);
      current = std::move(next);
      next = StepPlan{};
      if (current.entries.empty()) {
        // A projected plan can come out empty (its requests ended in the step it was planned beside):
        // plan again at once. Only an empty fresh plan means nothing can run.
        if (fresh && !core_.resolve_stall()) wait_for_work(true);
        have_last = false;
        continue;
      }
      if (have_last) core_.add_gap_seconds(std::chrono::duration<double>(Clock::now() - last_end).count());
      helper_->start([this, &next] {
        deliver();
        take_inbox();
        next = core_.plan();
      });
      std::string failure;
      try {
        core_.execute(current);
      } catch (const std::exception& e) {
        failure = e.what();
      }
      last_end = Clock::now();
      helper_->wait();
      if (failure.empty()) {
        core_.apply(current);
      } else {
        DSINFER_LOG_ERROR("engine: step failed: ", failure);
        core_.abort(current, core::str_cat("engine step failed: ", failure));
      }
      have_last = true;
      have_next = true;
      publish_metrics();
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
  RequestId next_id_ = 1;
  std::atomic<int64_t> waiting_{0};

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_;

  std::mutex join_mu_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Engine> make_engine(std::shared_ptr<ModelRunner> model, const EngineOptions& options) {
  return std::make_unique<EngineImpl>(std::move(model), options);
}

}  // namespace dsinfer::engine
