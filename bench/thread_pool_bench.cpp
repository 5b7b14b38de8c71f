// Fork/join latency of core::ThreadPool: what one parallel region costs when its tasks are empty, and
// a region of small tasks as a decode step issues hundreds of them.
#include <benchmark/benchmark.h>

#include <atomic>

#include "core/thread_pool.h"

namespace {

void BM_EmptyRegion(benchmark::State& state) {
  auto& pool = dsinfer::core::ThreadPool::global();
  const int64_t tasks = state.range(0) == 0 ? pool.size() : state.range(0);
  std::atomic<int64_t> n{0};
  for (auto _ : state) pool.run(tasks, [&](int64_t, int) { n.fetch_add(1, std::memory_order_relaxed); });
  benchmark::DoNotOptimize(n.load());
  state.SetLabel("threads=" + std::to_string(pool.size()));
}
BENCHMARK(BM_EmptyRegion)->Arg(0)->Arg(8)->Arg(64)->UseRealTime();

void BM_SmallWork(benchmark::State& state) {
  auto& pool = dsinfer::core::ThreadPool::global();
  std::vector<float> data(state.range(0), 1.0f);
  for (auto _ : state) {
    pool.parallel_for(static_cast<int64_t>(data.size()), 256, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] = data[i] * 0.5f + 1.0f;
    });
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_SmallWork)->Arg(1024)->Arg(16384)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
