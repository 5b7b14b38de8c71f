// Measured limits of the machine the kernels run on: streaming memory bandwidth and peak fp32 FMA
// rate of the dispatched SIMD target. `dsinfer bench` and bench/ compare kernel speeds with these
// (a roofline): decode is bounded by bandwidth, prefill by the FMA rate.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace dsinfer::kernels {

struct BandwidthResult {
  double gb_per_s = 0;  // best of the repeats, 1e9 bytes per second
  int64_t bytes = 0;    // buffer size read per repeat
  int threads = 0;
};

// Reads a buffer of `bytes` (default 1 GiB; it must be much larger than the last-level cache) with
// `threads` threads (each its own contiguous slice, SIMD loads summed so nothing is optimised away),
// `repeats` times; returns the best rate. The buffer is first written by the threads that read it.
BandwidthResult measure_read_bandwidth(int threads, int64_t bytes = int64_t{1} << 30, int repeats = 5);

struct FmaPeakResult {
  double gflops = 0;  // 2 flops per lane per FMA, all threads together
  int threads = 0;
  int lanes = 0;      // f32 lanes of the dispatched target's vectors
  std::string target;
};

// Runs independent FMA chains in registers on `threads` threads for about `seconds`, `repeats` times;
// returns the best rate.
FmaPeakResult measure_fma_peak(int threads, double seconds = 0.2, int repeats = 3);

// Both, for all hardware threads and for one, as one report.
struct MachineLimits {
  BandwidthResult bandwidth;          // all threads
  BandwidthResult bandwidth_single;   // one thread
  FmaPeakResult fma;                  // all threads
  FmaPeakResult fma_single;           // one thread
  std::string describe() const;       // several lines, for people
};
MachineLimits measure_machine_limits(int threads, int64_t bandwidth_bytes = int64_t{1} << 30);

namespace detail {

// One worker's timed run of a probe (seconds on a steady clock, read by the worker itself).
struct TimedRun {
  double begin = 0, end = 0;
};

// Work per second over the span that holds every run (earliest begin to latest end): runs that did not
// overlap (a loaded machine ran the threads one after another) are not counted as parallel. 0 when
// there is no run or the span is not positive. The probes time each worker this way because a start
// time read by the coordinating thread after it released the workers can land after they ran, when a
// loaded machine schedules that thread late: that gave a 75,826 GFLOP/s "peak" once.
double rate_over_span(std::span<const TimedRun> runs, double total_work);

// For tests: the coordinating thread waits until every worker has finished its timed run before it
// goes on (the worst case of being scheduled late), so the probes must not depend on its timing.
void set_probe_coordinator_late(bool late);

}  // namespace detail

}  // namespace dsinfer::kernels
