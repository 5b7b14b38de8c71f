// Traffic classes, their TTLs, and the parsers behind the --kv-ttl / --kv-store-bytes flags.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "kvstore/clock.h"

namespace dsinfer::kvstore {

// Why a block was computed; decides how long the store keeps it. Stored as one byte in each record.
enum class TrafficClass : uint8_t { kAgent = 0, kChat = 1 };
constexpr size_t kTrafficClasses = 2;

const char* traffic_class_name(TrafficClass c);
std::optional<TrafficClass> parse_traffic_class(std::string_view name);

struct TtlPolicy {
  // Indexed by TrafficClass. Defaults: agent 3 days (the published >= 72 h), chat 7 days.
  std::array<int64_t, kTrafficClasses> ttl_ns{3 * 86400 * kNsPerSecond, 7 * 86400 * kNsPerSecond};

  int64_t ttl(TrafficClass c) const { return ttl_ns[static_cast<size_t>(c)]; }
  int64_t min_ttl() const { return ttl_ns[0] < ttl_ns[1] ? ttl_ns[0] : ttl_ns[1]; }
  int64_t max_ttl() const { return ttl_ns[0] < ttl_ns[1] ? ttl_ns[1] : ttl_ns[0]; }
};

// "agent=3d,chat=7d": classes not named keep their value from `base`. Units s, m, h, d (bare: seconds).
TtlPolicy parse_ttl_policy(std::string_view text, TtlPolicy base = {});
int64_t parse_duration_ns(std::string_view text);
// "1048576", "512M", "2G", "1T" (powers of 1024).
int64_t parse_byte_size(std::string_view text);

}  // namespace dsinfer::kvstore
