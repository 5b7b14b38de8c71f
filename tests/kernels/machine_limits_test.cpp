// The machine-limit probes run and report sane values (their speed is a benchmark's business, not a test's).
#include "kernels/cpu/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dsinfer::kernels {
namespace {

TEST(MachineLimits, ProbesReportPositiveFiniteRates) {
  const BandwidthResult bw = measure_read_bandwidth(2, int64_t{8} << 20, 2);
  EXPECT_GT(bw.gb_per_s, 0.0);
  EXPECT_TRUE(std::isfinite(bw.gb_per_s));
  EXPECT_EQ(bw.threads, 2);
  EXPECT_GE(bw.bytes, (int64_t{8} << 20) - 4096);  // rounded down to whole vector steps per thread
  const FmaPeakResult fma = measure_fma_peak(1, 0.01);
  EXPECT_GT(fma.gflops, 0.0);
  EXPECT_TRUE(std::isfinite(fma.gflops));
  EXPECT_GE(fma.lanes, 1);
  EXPECT_FALSE(fma.target.empty());
}

TEST(MachineLimits, RateOverSpanCountsOnlyRunsThatOverlapAsParallel) {
  using detail::TimedRun;
  const std::vector<TimedRun> one = {{0.0, 2.0}}, together = {{0.0, 1.0}, {0.0, 1.0}},
                              one_after_other = {{0.0, 1.0}, {1.0, 2.0}}, none, empty_span = {{1.0, 1.0}};
  EXPECT_EQ(detail::rate_over_span(one, 10.0), 5.0);
  EXPECT_EQ(detail::rate_over_span(together, 20.0), 20.0);
  EXPECT_EQ(detail::rate_over_span(one_after_other, 20.0), 10.0);
  EXPECT_EQ(detail::rate_over_span(none, 1.0), 0.0);
  EXPECT_EQ(detail::rate_over_span(empty_span, 1.0), 0.0);
}

TEST(MachineLimits, ProbesDoNotDependOnWhenTheCoordinatorRuns) {
  // The coordinating thread goes on only after the workers finished (as a loaded machine may schedule
  // it). A rate timed from that thread would then divide the whole run's work by almost no time. The
  // bounds are physical, not timings: no core does more than two FMA vectors per cycle at 10 GHz, and
  // no core reads more than 1 TB/s.
  detail::set_probe_coordinator_late(true);
  const FmaPeakResult fma = measure_fma_peak(2, 0.05, 1);
  const BandwidthResult bw = measure_read_bandwidth(2, int64_t{32} << 20, 1);
  detail::set_probe_coordinator_late(false);
  EXPECT_GT(fma.gflops, 0.0);
  EXPECT_LE(fma.gflops, 2 * 2.0 * fma.lanes * 2 * 10.0) << "GFLOP/s";
  EXPECT_GT(bw.gb_per_s, 0.0);
  EXPECT_LE(bw.gb_per_s, 2 * 1000.0) << "GB/s";
}

}  // namespace
}  // namespace dsinfer::kernels
