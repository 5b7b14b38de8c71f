// The persistent block store: full blocks of compressed KV as opaque bytes, keyed by the engine's
// chained block hash, one file per record in a directory that any number of processes on any number of
// machines may share (a local disk, NFS, CephFS, a 3FS FUSE mount). Writes are queued and done by a
// writer thread (never the caller's); reads are asynchronous and answered through a callback or a
// future. A fault of the disk never reaches the caller: reads miss, writes are dropped and counted.
// README.md has the format, the layout, the lifetime rules and the plan for the engine.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/clock.h"
#include "kvstore/config.h"
#include "kvstore/file_ops.h"
#include "kvstore/gc.h"
#include "kvstore/reader.h"
#include "kvstore/stats.h"

namespace dsinfer::kvstore {

enum class ReadBackend { kAuto, kUring, kPread };

struct StoreOptions {
  std::string dir;
  TtlPolicy ttl;
  FsyncPolicy fsync = FsyncPolicy::kNone;
  // Write-behind queue bounds; a put beyond either is dropped (backpressure never blocks the caller).
  size_t max_queued_writes = 1024;
  int64_t max_queued_bytes = int64_t{256} << 20;
  ReadBackend read_backend = ReadBackend::kAuto;  // kAuto: io_uring when the kernel allows it, else pread
  unsigned queue_depth = 64;                      // io_uring reads in flight
  unsigned pread_threads = 4;
  int64_t max_record_bytes = int64_t{64} << 20;  // larger files are rejected unread
  // After ENOSPC, EIO and the like, writes stop for a backoff that doubles per failure up to the max.
  int64_t backoff_initial_ns = kNsPerSecond;
  int64_t backoff_max_ns = 300 * kNsPerSecond;
  Clock clock;      // default: the system clock
  IoFaults faults;  // tests only
};

class BlockStore {
 public:
  explicit BlockStore(StoreOptions options);
  // Finishes the writes already queued and the reads already submitted, then stops the threads.
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // Queues the record of block `key` (its tokens, and the key of the block before it) for writing;
  // false when it was dropped (queue full, or writes disabled after a disk fault). Returns at once.
  bool put(uint64_t key, std::span<const int32_t> tokens, std::vector<uint8_t> payload, TrafficClass traffic_class,
           uint64_t parent = 0);

  // Reads the record of request.key; `done` runs on an I/O thread (keep it short: hand the result over).
  void load(LoadRequest request, LoadCallback done);
  std::future<LoadResult> load(LoadRequest request);
  // Many reads in one submission (the blocks of one prompt): `done` runs once per request, in any order.
  void load_batch(std::vector<LoadRequest> requests, LoadCallback done);

  // Waits until every write accepted so far has been written or has failed (tests, shutdown).
  void flush();
  // Runs the collector over this store's directory with this store's TTLs and clock.
  GcReport collect_garbage(int64_t capacity_bytes = 0);

  bool writes_enabled() const;
  const char* read_backend_name() const { return reader_->name(); }
  const std::string& dir() const { return options_.dir; }
  StoreStats& stats() { return stats_; }
  const StoreStats& stats() const { return stats_; }

 private:
  struct WriteJob {
    uint64_t key;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> payload;
    TrafficClass traffic_class;
    uint64_t parent;
  };
  void writer_loop();
  void write_one(const WriteJob& job);
  void on_write_fault(int err);

  StoreOptions options_;
  StoreStats stats_;
  std::unique_ptr<RecordReader> reader_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;       // writer: work or stop
  std::condition_variable idle_cv_;  // flush: queue drained
  std::deque<WriteJob> queue_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false;
  bool stopping_ = false;
  int64_t disabled_until_ns_ = 0;  // writes dropped before this time
  int64_t backoff_ns_ = 0;
  std::thread writer_;
};

}  // namespace dsinfer::kvstore
