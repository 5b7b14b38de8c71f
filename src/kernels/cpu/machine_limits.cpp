// Bandwidth and FMA-peak probes. The inner loops are per Highway target, so the peak is the one of the
// target Linear dispatches to.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/machine_limits.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/linear_packed.h"
#include "kernels/cpu/machine_limits.h"
#include "kernels/cpu/targets.h"

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sum of n floats (n a multiple of 4 vectors), four independent accumulators so loads, not adds, bound it.
float ReadSum(const float* p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  for (int64_t i = 0; i + 4 * N <= n; i += 4 * N) {
    a0 = hn::Add(a0, hn::Load(d, p + i));
    a1 = hn::Add(a1, hn::Load(d, p + i + N));
    a2 = hn::Add(a2, hn::Load(d, p + i + 2 * N));
    a3 = hn::Add(a3, hn::Load(d, p + i + 3 * N));
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// `iters` rounds of 12 independent FMA chains; enough chains to cover FMA latency × ports on current
// x86 cores (4 × 2 = 8).
float FmaChains(int64_t iters, float seed) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 0.999999f);
  const auto c = hn::Set(d, seed * 1e-7f);
  auto a0 = hn::Set(d, seed), a1 = hn::Set(d, seed + 1), a2 = hn::Set(d, seed + 2), a3 = hn::Set(d, seed + 3);
  auto a4 = hn::Set(d, seed + 4), a5 = hn::Set(d, seed + 5), a6 = hn::Set(d, seed + 6), a7 = hn::Set(d, seed + 7);
  auto a8 = hn::Set(d, seed + 8), a9 = hn::Set(d, seed + 9), a10 = hn::Set(d, seed + 10), a11 = hn::Set(d, seed + 11);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c);
    a1 = hn::MulAdd(a1, m, c);
    a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c);
    a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c);
    a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c);
    a10 = hn::MulAdd(a10, m, c);
    a11 = hn::MulAdd(a11, m, c);
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)),
                         hn::Add(hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)), hn::Add(hn::Add(a8, a9), hn::Add(a10, a11))));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

int64_t FloatLanes() { return static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())); }

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {

HWY_EXPORT(ReadSum);
HWY_EXPORT(FmaChains);
HWY_EXPORT(FloatLanes);

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double now_seconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }
constexpr int64_t kFmasPerIter = 12;
std::atomic<bool> g_coordinator_late{false};

// Runs `repeats` rounds of `work(thread)` on `threads` fresh threads (after `setup(thread)` on each),
// each worker timing its own run; returns the runs, [repeat][thread].
template <class Setup, class Work>
std::vector<std::vector<detail::TimedRun>> timed_rounds(int threads, int repeats, Setup setup, Work work) {
  std::vector<std::vector<detail::TimedRun>> runs(repeats, std::vector<detail::TimedRun>(threads));
  std::barrier sync(threads + 1);
  std::atomic<int> finished{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      setup(t);
      sync.arrive_and_wait();
      for (int r = 0; r < repeats; ++r) {
        sync.arrive_and_wait();  // start
        runs[r][t].begin = now_seconds();
        work(t);
        runs[r][t].end = now_seconds();
        finished.fetch_add(1, std::memory_order_release);
        sync.arrive_and_wait();  // done
      }
    });
  }
  sync.arrive_and_wait();
  for (int r = 0; r < repeats; ++r) {
    sync.arrive_and_wait();
    if (g_coordinator_late.load(std::memory_order_relaxed)) {
      while (finished.load(std::memory_order_acquire) < (r + 1) * threads) std::this_thread::yield();
    }
    sync.arrive_and_wait();
  }
  for (auto& th : pool) th.join();
  return runs;
}
}  // namespace

double detail::rate_over_span(std::span<const TimedRun> runs, double total_work) {
  if (runs.empty()) return 0.0;
  double begin = runs[0].begin, end = runs[0].end;
  for (const TimedRun& r : runs) {
    begin = std::min(begin, r.begin);
    end = std::max(end, r.end);
  }
  return end > begin ? total_work / (end - begin) : 0.0;
}

void detail::set_probe_coordinator_late(bool late) { g_coordinator_late.store(late, std::memory_order_relaxed); }

BandwidthResult measure_read_bandwidth(int threads, int64_t bytes, int repeats) {
  threads = std::max(threads, 1);
  repeats = std::max(repeats, 1);
  const int64_t lanes = HWY_DYNAMIC_DISPATCH(FloatLanes)();
  // Every slice a whole number of 4-vector steps.
  const int64_t unit = 4 * lanes * threads;
  const int64_t n = std::max<int64_t>(unit, bytes / 4 / unit * unit);
  // The same memory the packed weights stream from (allocate_bytes: 2 MiB pages). A buffer on 4 KiB pages
  // read 30-33 GB/s against 34-36 on huge pages (alternated runs), so it understated the roofline.
  auto buffer = detail::allocate_bytes(n * 4);
  float* data = reinterpret_cast<float*>(buffer.get());
  const int64_t slice = n / threads;
  std::atomic<float> sink{0.0f};
  const auto runs = timed_rounds(
      threads, repeats,
      [&](int t) { std::memset(data + t * slice, 0, static_cast<size_t>(slice) * 4); },  // first touch by the reader
      [&](int t) { sink.store(HWY_DYNAMIC_DISPATCH(ReadSum)(data + t * slice, slice), std::memory_order_relaxed); });
  double best = 0;
  for (const auto& round : runs) best = std::max(best, detail::rate_over_span(round, static_cast<double>(n) * 4) / 1e9);
  return {best, n * 4, threads};
}

FmaPeakResult measure_fma_peak(int threads, double seconds, int repeats) {
  threads = std::max(threads, 1);
  FmaPeakResult r;
  r.threads = threads;
  r.lanes = static_cast<int>(HWY_DYNAMIC_DISPATCH(FloatLanes)());
  r.target = current_target_name();
  // Calibrate the iteration count on one thread.
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    volatile float s = HWY_DYNAMIC_DISPATCH(FmaChains)(iters, 1.0f);
    (void)s;
    const double dt = seconds_since(t0);
    if (dt > seconds / 8 || iters > (int64_t{1} << 40)) {
      iters = std::max<int64_t>(1024, static_cast<int64_t>(static_cast<double>(iters) * (seconds / std::max(dt, 1e-9))));
      break;
    }
    iters *= 4;
  }
  std::atomic<float> sink{0.0f};
  const auto runs = timed_rounds(
      threads, std::max(repeats, 1), [](int) {},
      [&](int t) {
        sink.store(HWY_DYNAMIC_DISPATCH(FmaChains)(iters, 1.0f + static_cast<float>(t)), std::memory_order_relaxed);
      });
  const double flops = 2.0 * static_cast<double>(kFmasPerIter) * static_cast<double>(r.lanes) *
                       static_cast<double>(iters) * threads;
  for (const auto& round : runs) r.gflops = std::max(r.gflops, detail::rate_over_span(round, flops) / 1e9);
  return r;
}

std::string MachineLimits::describe() const {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "memory read bandwidth: %.1f GB/s with %d threads, %.1f GB/s with 1 (buffer %.0f MiB)\n"
                "fp32 FMA peak (%s, %d lanes): %.1f GFLOP/s with %d threads, %.1f GFLOP/s with 1\n",
                bandwidth.gb_per_s, bandwidth.threads, bandwidth_single.gb_per_s,
                static_cast<double>(bandwidth.bytes) / (1 << 20), fma.target.c_str(), fma.lanes, fma.gflops,
                fma.threads, fma_single.gflops);
  return buf;
}

MachineLimits measure_machine_limits(int threads, int64_t bandwidth_bytes) {
  MachineLimits m;
  m.bandwidth = measure_read_bandwidth(threads, bandwidth_bytes);
  m.bandwidth_single = measure_read_bandwidth(1, bandwidth_bytes);
  m.fma = measure_fma_peak(threads);
  m.fma_single = measure_fma_peak(1);
  return m;
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
