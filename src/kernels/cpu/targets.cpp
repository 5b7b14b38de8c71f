#include "kernels/cpu/targets.h"

#include <algorithm>

#include "hwy/highway.h"
#include "hwy/targets.h"

namespace dsinfer::kernels {

std::vector<SimdTarget> available_targets() {
  std::vector<SimdTarget> out;
  for (int64_t bits : hwy::SupportedAndGeneratedTargets()) out.push_back({bits, hwy::TargetName(bits)});
  // Highway numbers better targets with lower bits; list the weakest first.
  std::sort(out.begin(), out.end(), [](const SimdTarget& a, const SimdTarget& b) { return a.bits > b.bits; });
  return out;
}

std::string current_target_name() {
  const int64_t supported = hwy::SupportedTargets() & HWY_TARGETS;
  // The best (lowest bit) target of the mask is the one dispatch picks.
  return hwy::TargetName(supported & -supported);
}

ScopedTarget::ScopedTarget(const SimdTarget& target) {
  hwy::SetSupportedTargetsForTest(target.bits);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

ScopedTarget::~ScopedTarget() {
  hwy::SetSupportedTargetsForTest(0);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
}

}  // namespace dsinfer::kernels
