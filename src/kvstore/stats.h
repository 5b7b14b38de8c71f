// Counters of the store and the SWA pool, plain atomics so the engine can export them on /metrics
// without a lock. Totals since start; nanosecond latencies are sums (divide by loads for the mean).
#pragma once

#include <atomic>
#include <cstdint>

namespace dsinfer::kvstore {

struct StoreStats {
  std::atomic<int64_t> loads{0};             // load requests completed
  std::atomic<int64_t> loads_answered{0};    // load callbacks that returned (after `loads`, which counts before)
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> misses{0};            // no record, rejected records and read errors
  std::atomic<int64_t> rejected{0};          // truncated, corrupted or foreign records (removed)
  std::atomic<int64_t> read_errors{0};       // I/O errors while reading (not removed)
  std::atomic<int64_t> bytes_read{0};
  std::atomic<int64_t> load_latency_ns{0};   // submit -> callback, summed
  std::atomic<int64_t> writes_queued{0};
  std::atomic<int64_t> records_written{0};
  std::atomic<int64_t> bytes_written{0};
  std::atomic<int64_t> writes_existing{0};   // key already stored: only its mtime refreshed
  std::atomic<int64_t> dropped_writes{0};    // write queue full (backpressure)
  std::atomic<int64_t> dropped_disabled{0};  // writes skipped while disabled after a disk fault
  std::atomic<int64_t> write_errors{0};
  std::atomic<int64_t> gc_expired{0};
  std::atomic<int64_t> gc_evicted{0};
  std::atomic<int64_t> gc_scratch_removed{0};
};

struct SwaPoolStats {
  std::atomic<int64_t> entries{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> hits{0};
  std::atomic<int64_t> misses{0};
  std::atomic<int64_t> expiries{0};
  std::atomic<int64_t> evictions{0};  // dropped for the byte cap
};

}  // namespace dsinfer::kvstore
