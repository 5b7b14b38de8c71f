// Wall-clock time for TTLs and record timestamps, injectable so tests can move time without sleeping.
// Wall time (not steady time) because record ages live in file mtimes shared by several machines.
#pragma once

#include <cstdint>
#include <functional>

namespace dsinfer::kvstore {

constexpr int64_t kNsPerSecond = 1'000'000'000;

// Nanoseconds since the Unix epoch.
using Clock = std::function<int64_t()>;

Clock system_clock();

}  // namespace dsinfer::kvstore
