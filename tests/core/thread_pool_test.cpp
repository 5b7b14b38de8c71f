#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

namespace dsinfer::core {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  ThreadPool pool(3);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + round % 37;
    std::vector<std::atomic<int>> hits(n);
    pool.run(n, [&](int64_t t, int thread) {
      EXPECT_GE(thread, 0);
      EXPECT_LT(thread, pool.size());
      hits[t].fetch_add(1);
    });
    for (int i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round << " task " << i;
  }
}

TEST(ThreadPool, ParallelForCoversRangeWithoutOverlap) {
  ThreadPool pool(2);
  const int64_t n = 10007;
  std::vector<int> seen(n, 0);
  pool.parallel_for(n, 100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) seen[i] += 1;
  });
  EXPECT_EQ(std::accumulate(seen.begin(), seen.end(), 0), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1);
}

TEST(ThreadPool, NestedRunExecutesInlineOnTheSameThreadIndex) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  std::atomic<int> mismatched{0};
  pool.run(4, [&](int64_t, int outer) {
    pool.run(5, [&](int64_t, int inner) {
      if (inner != outer) mismatched.fetch_add(1);
      total.fetch_add(1);
    });
  });
  EXPECT_EQ(total.load(), 20);
  EXPECT_EQ(mismatched.load(), 0);
}

TEST(ThreadPool, SingleThreadPoolRunsOnCaller) {
  ThreadPool pool(1);
  int sum = 0;
  pool.run(10, [&](int64_t t, int thread) {
    EXPECT_EQ(thread, 0);
    sum += static_cast<int>(t);
  });
  EXPECT_EQ(sum, 45);
}

// Tasks running at the same time never share a thread index, so per-thread scratch is safe.
TEST(ThreadPool, ConcurrentTasksHaveDistinctThreadIndices) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> busy(pool.size());
  std::atomic<int> clashes{0};
  for (int round = 0; round < 300; ++round) {
    pool.run(16, [&](int64_t, int thread) {
      if (busy[thread].exchange(1) != 0) clashes.fetch_add(1);
      std::this_thread::yield();
      busy[thread].store(0);
    });
  }
  EXPECT_EQ(clashes.load(), 0);
}

TEST(ThreadPool, ExceptionPropagatesAndPoolStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> ran{0};
  EXPECT_THROW(pool.run(100,
                        [&](int64_t t, int) {
                          ran.fetch_add(1);
                          if (t == 7) throw std::runtime_error("task 7");
                        }),
               std::runtime_error);
  EXPECT_GE(ran.load(), 1);
  EXPECT_LE(ran.load(), 100);
  std::atomic<int> after{0};
  pool.run(50, [&](int64_t, int) { after.fetch_add(1); });
  EXPECT_EQ(after.load(), 50);
}

// After the workers have gone to sleep (spin budget exhausted), a run still wakes them and completes.
TEST(ThreadPool, WakesSleepingWorkers) {
  ThreadPool pool(3);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    std::vector<std::atomic<int>> hits(64);
    std::atomic<int> worker_tasks{0};
    pool.run(64, [&](int64_t t, int thread) {
      hits[t].fetch_add(1);
      if (thread != 0) worker_tasks.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    // 64 tasks of 200 µs each: the woken workers take some of them.
    EXPECT_GT(worker_tasks.load(), 0) << "round " << round;
  }
}

TEST(ThreadPool, ManyTinyRegionsInARow) {
  ThreadPool pool(2);
  int64_t sum = 0;
  std::vector<int64_t> part(pool.size());
  for (int round = 0; round < 20000; ++round) {
    std::fill(part.begin(), part.end(), 0);
    pool.run(4, [&](int64_t t, int thread) { part[thread] += t + 1; });
    for (int64_t p : part) sum += p;
  }
  EXPECT_EQ(sum, int64_t{20000} * 10);
}

TEST(ThreadPool, RunsFromSeveralThreadsAreSerialised) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      for (int round = 0; round < 300; ++round) pool.run(7, [&](int64_t t, int) { total.fetch_add(t); });
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), int64_t{3} * 300 * 21);
}

// `bench --breakdown` counts parallel regions per stage: only runs handed to the workers are regions.
TEST(ThreadPool, RegionsCountOnlyRunsHandedToTheWorkers) {
  ThreadPool pool(2);
  EXPECT_EQ(pool.regions(), 0u);
  pool.run(1, [](int64_t, int) {});                        // one task: on the caller
  pool.parallel_for(10, 100, [](int64_t, int64_t) {});    // one chunk: on the caller
  EXPECT_EQ(pool.regions(), 0u);
  pool.run(4, [&](int64_t, int) { pool.run(3, [](int64_t, int) {}); });  // nested runs are inline
  EXPECT_EQ(pool.regions(), 1u);
  pool.parallel_for(1000, 10, [](int64_t, int64_t) {});
  EXPECT_EQ(pool.regions(), 2u);
  ThreadPool one(1);
  one.run(10, [](int64_t, int) {});
  EXPECT_EQ(one.regions(), 0u);
}

// The caller's time inside regions is summed only while timing is on, and covers the tasks' own time.
TEST(ThreadPool, RegionTimingSumsTheCallersTimeInsideRegions) {
  using Clock = std::chrono::steady_clock;
  ThreadPool pool(2);
  auto busy_task = [](int64_t, int) {
    const auto until = Clock::now() + std::chrono::milliseconds(2);
    while (Clock::now() < until) {
    }
  };
  pool.run(2, busy_task);
  EXPECT_EQ(pool.region_ns(), 0u);
  pool.set_region_timing(true);
  pool.run(2, busy_task);  // the caller waits for both tasks, each of which ran >= 2 ms
  const uint64_t timed = pool.region_ns();
  EXPECT_GE(timed, 2'000'000u);
  pool.set_region_timing(false);
  pool.run(2, busy_task);
  EXPECT_EQ(pool.region_ns(), timed);
}

TEST(ThreadPool, DestroysWhileWorkersSleep) {
  for (int i = 0; i < 3; ++i) {
    ThreadPool pool(3);
    pool.run(8, [](int64_t, int) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  SUCCEED();
}

}  // namespace
}  // namespace dsinfer::core
