// Random inputs for the kernel tests: normal values of a given scale, reproducible from a seed.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace dsinfer::kernels::testing {

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

}  // namespace dsinfer::kernels::testing
