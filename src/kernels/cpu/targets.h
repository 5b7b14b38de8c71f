// The SIMD targets Highway compiled into this build that the CPU can run, and a scope that forces one of
// them. Production code never needs this (Highway picks the best target on first use); tests use it to
// run every compiled target against the scalar oracle of each kernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsinfer::kernels {

struct SimdTarget {
  int64_t bits = 0;
  std::string name;
};

// Targets compiled into the kernels library and supported by this CPU, best last.
std::vector<SimdTarget> available_targets();

// The name of the target dynamic dispatch uses now.
std::string current_target_name();

// While alive, dynamic dispatch uses only `target` (one entry of available_targets()).
class ScopedTarget {
 public:
  explicit ScopedTarget(const SimdTarget& target);
  ~ScopedTarget();
  ScopedTarget(const ScopedTarget&) = delete;
  ScopedTarget& operator=(const ScopedTarget&) = delete;
};

}  // namespace dsinfer::kernels
