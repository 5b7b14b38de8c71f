// The thread pool with many more threads than cores (a pool sized for a 64+ core server, run on a
// small machine, or a server whose cores are shared): workers are preempted while they hold a task or
// spin, so every ordering the scheduler can produce shows up here. Correctness only, never timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace dsinfer::core {
namespace {

int oversubscribed_threads() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(4 * cores, 64, 256);
}

TEST(ThreadPoolOversubscribed, EveryTaskRunsOnceOnADistinctThreadIndex) {
  ThreadPool pool(oversubscribed_threads());
  ASSERT_GT(pool.size(), static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::atomic<int>> busy(pool.size());
  std::atomic<int> clashes{0}, bad_index{0};
  const int64_t n = pool.size();
  // Fewer tasks than threads, exactly as many, one more, and many per thread.
  for (int64_t tasks : {int64_t{1}, int64_t{2}, n - 1, n, n + 1, 4 * n + 3}) {
    for (int round = 0; round < 5; ++round) {
      std::vector<std::atomic<int>> hits(tasks);
      pool.run(tasks, [&](int64_t t, int thread) {
        if (thread < 0 || thread >= pool.size()) {
          bad_index.fetch_add(1);
          return;
        }
        if (busy[thread].exchange(1) != 0) clashes.fetch_add(1);
        hits[t].fetch_add(1);
        if (t % 3 == 0) std::this_thread::yield();  // give the scheduler a chance to preempt here
        busy[thread].store(0);
      });
      for (int64_t i = 0; i < tasks; ++i) ASSERT_EQ(hits[i].load(), 1) << tasks << " tasks, round " << round;
    }
  }
  EXPECT_EQ(clashes.load(), 0);
  EXPECT_EQ(bad_index.load(), 0);
}

TEST(ThreadPoolOversubscribed, ParallelForAndPerThreadPartialsAddUp) {
  ThreadPool pool(oversubscribed_threads());
  std::vector<int64_t> part(pool.size());
  const int64_t n = 100003;
  for (int round = 0; round < 200; ++round) {
    std::fill(part.begin(), part.end(), 0);
    // Per-thread partial sums (the pattern kernels use for scratch): no two live tasks share an index.
    pool.parallel_for(n, 97, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i;
      pool.run(1, [&](int64_t, int thread) { part[thread] += s; });  // nested: inline, same index
    });
    int64_t sum = 0;
    for (int64_t p : part) sum += p;
    ASSERT_EQ(sum, n * (n - 1) / 2) << "round " << round;
  }
}

TEST(ThreadPoolOversubscribed, ExceptionInOneTaskLeavesThePoolUsable) {
  ThreadPool pool(oversubscribed_threads());
  for (int round = 0; round < 10; ++round) {
    EXPECT_THROW(pool.run(3 * pool.size(),
                          [&](int64_t t, int) {
                            if (t == 5 + round) throw std::runtime_error("task");
                          }),
                 std::runtime_error);
    std::atomic<int64_t> after{0};
    pool.run(2 * pool.size(), [&](int64_t t, int) { after.fetch_add(t); });
    const int64_t m = 2 * pool.size();
    ASSERT_EQ(after.load(), m * (m - 1) / 2);
  }
}

}  // namespace
}  // namespace dsinfer::core
