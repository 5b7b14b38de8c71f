#include "cli/stage_report.h"

#include <cstdio>

namespace dsinfer::cli {

namespace v4 = model::deepseek_v4;

void print_stage_totals(const v4::StageProfile& p, double wall_s, int64_t tokens, int threads, const char* what) {
  if (p.steps.empty()) return;
  std::printf("breakdown of %s, %d threads (wall ms; serial = outside parallel regions, the other threads idle):\n",
              what, threads);
  std::printf("  %-22s %10s %10s %6s %8s %10s\n", "stage", "ms", "serial", "share", "regions", "us/token");
  double sum = 0;
  for (int i = 0; i < static_cast<int>(v4::Stage::kCount); ++i) {
    double t = 0, serial = 0;
    for (size_t k = 0; k < p.steps.size(); ++k) {
      t += p.steps[k][i];
      serial += p.serial[k][i];
    }
    sum += t;
    std::printf("  %-22s %10.2f %10.2f %5.1f%% %8llu %10.1f\n", v4::stage_name(static_cast<v4::Stage>(i)), t * 1e3,
                serial * 1e3, 100.0 * t / wall_s, static_cast<unsigned long long>(p.regions[i]),
                t * 1e6 / static_cast<double>(tokens));
  }
  std::printf("  %-22s %10.2f %10s %5.1f%%\n", "outside the forward", (wall_s - sum) * 1e3, "",
              100.0 * (wall_s - sum) / wall_s);
}

}  // namespace dsinfer::cli
