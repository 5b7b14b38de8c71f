#include "core/thread_pool.h"

#include <chrono>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSINFER_PAUSE() _mm_pause()
#else
#define DSINFER_PAUSE() std::this_thread::yield()
#endif

namespace dsinfer::core {

thread_local bool ThreadPool::in_task_ = false;
thread_local int ThreadPool::tls_thread_ = 0;

namespace {
// Pauses a worker spins for the next job before it sleeps: a few hundred microseconds, longer than
// the gaps between the regions of a decode step, short enough not to burn a core when idle.
constexpr int kSpinPauses = 1 << 14;
// Pauses the caller spins on unfinished tasks before it starts yielding the core to them (matters
// only when there are more runnable threads than cores).
constexpr int kCallerSpinPauses = 1 << 12;

int default_threads() {
  if (const char* env = std::getenv("DSINFER_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}

inline bool is_new_job(uint64_t job, uint64_t seen) { return (job & 1) != 0 && job != seen; }
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = default_threads();
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::work(int thread) {
  in_task_ = true;
  const int64_t n = n_tasks_;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n) break;
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        call_(ctx_, task, thread);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    done_tasks_.fetch_add(1, std::memory_order_release);
  }
  in_task_ = false;
}

uint64_t ThreadPool::participate(int thread) {
  // Register first, then look: the caller closes the job and then waits for active_ == 0, so either it
  // sees this worker registered, or this worker sees the job closed (both accesses are seq_cst).
  active_.fetch_add(1);
  const uint64_t job = job_.load();
  if (job & kOpen) work(thread);
  active_.fetch_sub(1, std::memory_order_release);
  return job;
}

void ThreadPool::run_erased(int64_t n_tasks, void* ctx, Trampoline call) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  regions_.fetch_add(1, std::memory_order_relaxed);
  const bool timed = time_regions_.load(std::memory_order_relaxed);
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  // No worker is registered (the previous run waited for that), so the job's fields are ours.
  n_tasks_ = n_tasks;
  ctx_ = ctx;
  call_ = call;
  error_ = nullptr;
  failed_.store(false, std::memory_order_relaxed);
  next_task_.store(0, std::memory_order_relaxed);
  done_tasks_.store(0, std::memory_order_relaxed);
  ++epoch_;
  job_.store(epoch_ << 1 | kOpen);
  wake_.fetch_add(1);
  if (sleepers_.load() > 0) wake_.notify_all();

  const int saved_thread = tls_thread_;
  tls_thread_ = 0;
  work(0);
  tls_thread_ = saved_thread;
  for (int spin = 0; done_tasks_.load(std::memory_order_acquire) < n_tasks; ++spin) {
    if (spin < kCallerSpinPauses) {
      DSINFER_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_.store(epoch_ << 1);  // closed
  // Workers that registered before the close leave as soon as their claim fails.
  while (active_.load(std::memory_order_acquire) > 0) DSINFER_PAUSE();
  if (timed) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    region_ns_.fetch_add(static_cast<uint64_t>(ns.count()), std::memory_order_relaxed);
  }
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void ThreadPool::worker_loop(int index) {
  tls_thread_ = index;
  uint64_t seen = 0;
  for (;;) {
    int spin = 0;
    uint64_t job = job_.load(std::memory_order_acquire);
    while (!is_new_job(job, seen)) {
      if (stop_.load(std::memory_order_relaxed)) return;
      if (++spin < kSpinPauses) {
        DSINFER_PAUSE();
      } else {
        // Sleep until the next job. Order: announce, read the futex word, re-check the job; the caller
        // publishes the job, bumps the word, then reads sleepers_ (all seq_cst), so no wake-up is lost.
        sleepers_.fetch_add(1);
        const uint32_t w = wake_.load();
        if (!is_new_job(job_.load(), seen) && !stop_.load()) wake_.wait(w);
        sleepers_.fetch_sub(1);
        spin = 0;
      }
      job = job_.load(std::memory_order_acquire);
    }
    seen = participate(index);
  }
}

}  // namespace dsinfer::core
