// Little-endian integers appended to a byte buffer: the one encoding every disagg message and the
// sequence handoff use for their lengths and counters.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer::disagg {

inline void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace dsinfer::disagg
