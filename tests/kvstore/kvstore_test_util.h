// Shared by the kvstore tests: a temp directory removed afterwards, a clock the test moves, records.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kvstore/clock.h"

namespace dsinfer::kvstore::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvstore_test.XXXXXX").string();
    EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Starts at a fixed date; tests move it forward explicitly.
class FakeClock {
 public:
  static constexpr int64_t kStart = int64_t{1'780'000'000} * kNsPerSecond;
  int64_t now() const { return now_.load(); }
  void advance(int64_t ns) { now_.fetch_add(ns); }
  Clock clock() {
    return [this] { return now_.load(); };
  }

 private:
  std::atomic<int64_t> now_{kStart};
};

constexpr int64_t kHour = 3600 * kNsPerSecond;
constexpr int64_t kDay = 24 * kHour;

inline std::vector<int32_t> block_tokens(uint64_t key, size_t n = 128) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((key * 2654435761u + i * 40503u) % 129280);
  return t;
}

inline std::vector<uint8_t> block_payload(uint64_t key, size_t bytes = 4096) {
  std::vector<uint8_t> p(bytes);
  uint64_t x = key * 0x9E3779B97F4A7C15ull + 1;
  for (auto& b : p) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  return p;
}

// Keys spread over the fan-out directories the way real hashes are.
inline uint64_t test_key(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }

}  // namespace dsinfer::kvstore::testing
