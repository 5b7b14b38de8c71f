// The bytes the UCX process tests move: a pattern that depends on the position and the transfer id, so a
// chunk placed at the wrong offset or a payload of another transfer does not compare equal.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer::disagg::testing {

inline std::vector<uint8_t> test_pattern(uint64_t transfer, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  uint64_t x = transfer * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

}  // namespace dsinfer::disagg::testing
