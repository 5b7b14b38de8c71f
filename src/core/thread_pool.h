// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part in every run,
// so a pool of N threads starts N-1 workers. A decode step issues hundreds of small parallel regions, so
// a region must cost about a microsecond:
//  - workers spin (with pause) for a while after each region before they sleep on a futex, and the
//    caller only makes the wake-up system call when some worker actually sleeps;
//  - tasks are claimed dynamically, and a run waits only for the workers that joined it (a worker that
//    is asleep or preempted does not hold the caller up; the caller then runs the tasks itself).
// An exception thrown by a task skips the tasks not yet started and is rethrown by run() once every
// started task has finished.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace dsinfer::core {

class ThreadPool {
 public:
  // threads <= 0 picks DSINFER_THREADS or the hardware concurrency.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) for every task in [0, n_tasks); thread is in [0, size()) and no two tasks
  // running at the same time share it (per-thread scratch can be indexed by it). Returns when all tasks
  // are done. Called from inside a task (of any pool), it runs the tasks inline (no nested parallelism).
  // Runs from different threads at the same time are serialised.
  template <typename F>
  void run(int64_t n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || workers_.empty() || in_task_) {
      const int thread = in_task_ ? tls_thread_ : 0;
      for (int64_t t = 0; t < n_tasks; ++t) fn(t, thread);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run_erased(n_tasks, const_cast<void*>(static_cast<const void*>(&fn)),
               [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); });
  }

  // Splits [0, n) into at most size()*4 contiguous ranges of at least `grain` items; fn(begin, end).
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(size()) * 4);
    chunks = std::max<int64_t>(chunks, 1);
    const int64_t step = (n + chunks - 1) / chunks;
    run((n + step - 1) / step, [&](int64_t c, int) { fn(c * step, std::min(n, (c + 1) * step)); });
  }

  // Parallel regions this pool has run (runs of one task, or inline in a task, are not regions):
  // what `dsinfer bench --breakdown` counts per stage.
  uint64_t regions() const { return regions_.load(std::memory_order_relaxed); }
  // With region timing on, the caller's wall time inside parallel regions (ns) is summed as well: the
  // rest of a stage is serial work, during which the other threads idle.
  void set_region_timing(bool on) { time_regions_.store(on, std::memory_order_relaxed); }
  uint64_t region_ns() const { return region_ns_.load(std::memory_order_relaxed); }

  // The process-wide pool used by kernels when none is passed explicitly.
  static ThreadPool& global();

 private:
  using Trampoline = void (*)(void*, int64_t, int);
  void run_erased(int64_t n_tasks, void* ctx, Trampoline call);
  void worker_loop(int index);
  // Joins the open job if there is one; returns the job word it saw.
  uint64_t participate(int thread);
  void work(int thread);

  static constexpr uint64_t kOpen = 1;  // low bit of job_: tasks may be claimed

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one run at a time
  // The job: epoch << 1 | open. Its fields below are written by the caller only while no worker has
  // joined (active_ == 0 after the previous close).
  alignas(64) std::atomic<uint64_t> job_{0};
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<int64_t> done_tasks_{0};
  alignas(64) std::atomic<int> active_{0};    // workers inside the current job
  alignas(64) std::atomic<uint32_t> wake_{0};  // futex word, bumped on every new job
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> regions_{0};
  std::atomic<bool> time_regions_{false};
  std::atomic<uint64_t> region_ns_{0};
  int64_t n_tasks_ = 0;
  uint64_t epoch_ = 0;
  void* ctx_ = nullptr;
  Trampoline call_ = nullptr;
  std::exception_ptr error_;
  std::mutex error_mutex_;

  static thread_local bool in_task_;
  static thread_local int tls_thread_;
};

}  // namespace dsinfer::core
