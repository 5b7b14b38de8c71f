// The machine-limit probes run and report sane values (their speed is a benchmark's business, not a test's).
#include "kernels/cpu/machine_limits.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace dsinfer::kernels
