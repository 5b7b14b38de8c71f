#include "kvstore/config.h"

#include <charconv>
#include <cctype>
#include <chrono>
#include <limits>

#include "core/error.h"

namespace dsinfer::kvstore {

Clock system_clock() {
  return [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
}

const char* traffic_class_name(TrafficClass c) {
  switch (c) {
    case TrafficClass::kAgent: return "agent";
    case TrafficClass::kChat: return "chat";
  }
  return "?";
}

std::optional<TrafficClass> parse_traffic_class(std::string_view name) {
  if (name == "agent") return TrafficClass::kAgent;
  if (name == "chat") return TrafficClass::kChat;
  return std::nullopt;
}

namespace {

// A non-negative integer followed by an optional unit from `units` (multipliers); the whole text must match.
int64_t parse_scaled(std::string_view text, std::string_view what,
                     std::initializer_list<std::pair<char, int64_t>> units, int64_t bare_scale) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  DSINFER_CHECK(ec == std::errc() && ptr != text.data(), what, ": expected a number, got '", text, "'");
  std::string_view rest(ptr, text.data() + text.size() - ptr);
  int64_t scale = bare_scale;
  if (!rest.empty()) {
    bool found = false;
    for (const auto& [unit, mult] : units) {
      if (rest.size() == 1 && std::tolower(static_cast<unsigned char>(rest[0])) == unit) {
        scale = mult;
        found = true;
      }
    }
    DSINFER_CHECK(found, what, ": unknown unit in '", text, "'");
  }
  DSINFER_CHECK(value <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / scale), what, ": '", text,
                "' is too large");
  return static_cast<int64_t>(value) * scale;
}

}  // namespace

int64_t parse_duration_ns(std::string_view text) {
  constexpr int64_t s = kNsPerSecond;
  return parse_scaled(text, "duration", {{'s', s}, {'m', 60 * s}, {'h', 3600 * s}, {'d', 86400 * s}}, s);
}

int64_t parse_byte_size(std::string_view text) {
  return parse_scaled(text, "byte size",
                      {{'k', int64_t{1} << 10}, {'m', int64_t{1} << 20}, {'g', int64_t{1} << 30}, {'t', int64_t{1} << 40}},
                      1);
}

TtlPolicy parse_ttl_policy(std::string_view text, TtlPolicy base) {
  while (!text.empty()) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const size_t eq = item.find('=');
    DSINFER_CHECK(eq != std::string_view::npos, "kv ttl: expected CLASS=DURATION, got '", item, "'");
    const auto cls = parse_traffic_class(item.substr(0, eq));
    DSINFER_CHECK(cls.has_value(), "kv ttl: unknown traffic class '", item.substr(0, eq), "' (agent, chat)");
    const int64_t ns = parse_duration_ns(item.substr(eq + 1));
    DSINFER_CHECK(ns > 0, "kv ttl: the TTL of ", item.substr(0, eq), " must be positive");
    base.ttl_ns[static_cast<size_t>(*cls)] = ns;
  }
  return base;
}

}  // namespace dsinfer::kvstore
