// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part in every run,
// so a pool of N threads starts N-1 workers. Workers spin briefly before sleeping: a decode step issues
// hundreds of small parallel regions and waking a sleeping thread costs more than the region itself.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
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

  // Calls fn(task, thread) for every task in [0, n_tasks); thread is in [0, size()). Returns when all
  // tasks are done. Called from inside a task, it runs the tasks inline (no nested parallelism).
  template <typename F>
  void run(int64_t n_tasks, F&& fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || workers_.empty() || in_task_) {
      for (int64_t t = 0; t < n_tasks; ++t) fn(t, current_thread_index());
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run_erased(n_tasks, &fn, [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); });
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

  // The process-wide pool used by kernels when none is passed explicitly.
  static ThreadPool& global();

 private:
  using Trampoline = void (*)(void*, int64_t, int);
  void run_erased(int64_t n_tasks, void* ctx, Trampoline call);
  void worker_loop(int index);
  void drain(int thread);
  static int current_thread_index();

  std::vector<std::thread> workers_;
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int64_t> next_task_{0};
  alignas(64) std::atomic<int64_t> done_tasks_{0};
  std::atomic<int> active_workers_{0};
  int64_t n_tasks_ = 0;
  void* ctx_ = nullptr;
  Trampoline call_ = nullptr;
  std::atomic<bool> stop_{false};
  static thread_local bool in_task_;
};

}  // namespace dsinfer::core
