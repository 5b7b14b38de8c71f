#include "core/thread_pool.h"

#include <cstdlib>
#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DSINFER_PAUSE() _mm_pause()
#else
#define DSINFER_PAUSE() std::this_thread::yield()
#endif

namespace dsinfer::core {

thread_local bool ThreadPool::in_task_ = false;
namespace {
thread_local int tls_thread_index = 0;
constexpr int kSpinIterations = 20000;

int default_threads() {
  if (const char* env = std::getenv("DSINFER_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(hw);
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = default_threads();
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

int ThreadPool::current_thread_index() { return tls_thread_index; }

void ThreadPool::drain(int thread) {
  in_task_ = true;
  for (;;) {
    const int64_t task = next_task_.fetch_add(1, std::memory_order_acq_rel);
    if (task >= n_tasks_) break;
    call_(ctx_, task, thread);
    done_tasks_.fetch_add(1, std::memory_order_acq_rel);
  }
  in_task_ = false;
}

void ThreadPool::run_erased(int64_t n_tasks, void* ctx, Trampoline call) {
  // One run at a time: concurrent callers from different threads (e.g. two engines) serialise here.
  static std::mutex run_mutex;
  std::lock_guard<std::mutex> lock(run_mutex);
  n_tasks_ = n_tasks;
  ctx_ = ctx;
  call_ = call;
  done_tasks_.store(0, std::memory_order_relaxed);
  next_task_.store(0, std::memory_order_relaxed);
  active_workers_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  drain(0);
  while (done_tasks_.load(std::memory_order_acquire) < n_tasks) DSINFER_PAUSE();
  // Workers may still be between their last failed claim and leaving drain(); wait so the next run
  // does not reset counters under them.
  while (active_workers_.load(std::memory_order_acquire) > 0) DSINFER_PAUSE();
}

void ThreadPool::worker_loop(int index) {
  tls_thread_index = index;
  // Not generation_.load(): a run may already have started before this thread got scheduled, and
  // that run waits for every worker.
  uint64_t seen = 0;
  for (;;) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0; now == seen && spin < kSpinIterations; ++spin) {
      DSINFER_PAUSE();
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = now;
    if (stop_.load()) return;
    drain(index);
    active_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace dsinfer::core
