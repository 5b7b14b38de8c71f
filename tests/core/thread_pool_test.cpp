#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
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

TEST(ThreadPool, NestedRunExecutesInline) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.run(4, [&](int64_t, int) { pool.run(5, [&](int64_t, int) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 20);
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

}  // namespace
}  // namespace dsinfer::core
