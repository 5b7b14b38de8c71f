// Garbage collection of a store directory: expired records (TTL per traffic class from the last use),
// then least recently used records while the store is above its high watermark, and scratch files left
// by killed writers or collectors. Safe to run in several processes on one directory at once.
#pragma once

#include <cstdint>
#include <string>

#include "kvstore/clock.h"
#include "kvstore/config.h"
#include "kvstore/stats.h"

namespace dsinfer::kvstore {

struct GcOptions {
  TtlPolicy ttl;
  int64_t capacity_bytes = 0;    // 0: no cap
  double high_watermark = 0.95;  // evict when the records' bytes exceed this share of the capacity...
  double low_watermark = 0.85;   // ...down to this share
  // Temp files older than this belong to a writer that died (a live one renames within seconds).
  int64_t scratch_max_age_ns = 3600 * kNsPerSecond;
};

struct GcReport {
  int64_t records_scanned = 0;
  int64_t bytes_scanned = 0;
  int64_t expired = 0;          // removed for their TTL (or an unreadable header)
  int64_t evicted = 0;          // removed for the capacity
  int64_t scratch_removed = 0;
  int64_t bytes_removed = 0;    // records only
  int64_t records_left = 0;
  int64_t bytes_left = 0;
};

// `stats` may be null.
GcReport collect_garbage(const std::string& dir, const GcOptions& options, const Clock& clock,
                         StoreStats* stats = nullptr);

}  // namespace dsinfer::kvstore
