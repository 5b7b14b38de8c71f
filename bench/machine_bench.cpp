// Prints the machine's measured limits (memory read bandwidth, fp32 FMA peak) for every thread count
// from 1 to the pool size. Usage: bench_machine [threads] [buffer MiB]
#include <cstdio>
#include <cstdlib>

#include "core/thread_pool.h"
#include "kernels/cpu/machine_limits.h"

int main(int argc, char** argv) {
  using namespace dsinfer;
  const int threads = argc > 1 ? std::atoi(argv[1]) : core::ThreadPool::global().size();
  const int64_t mib = argc > 2 ? std::atoll(argv[2]) : 1024;
  for (int t = 1; t <= threads; ++t) {
    const auto bw = kernels::measure_read_bandwidth(t, mib << 20);
    const auto fma = kernels::measure_fma_peak(t);
    std::printf("threads %d: read bandwidth %.1f GB/s, fp32 FMA peak %.1f GFLOP/s (%s, %d lanes)\n", t, bw.gb_per_s,
                fma.gflops, fma.target.c_str(), fma.lanes);
  }
  return 0;
}
