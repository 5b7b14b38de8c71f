// Asynchronous record reads: the caller's thread only queues a request; an I/O thread opens, reads,
// checks and refreshes the record, then runs the request's callback. Two back ends: io_uring (one
// thread, a bounded number of reads in flight, submitted in batches) and, where io_uring is not
// available (seccomp in some containers), a few threads doing pread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvstore/clock.h"
#include "kvstore/config.h"
#include "kvstore/file_ops.h"
#include "kvstore/record.h"
#include "kvstore/stats.h"

namespace dsinfer::kvstore {

struct LoadRequest {
  uint64_t key = 0;
  std::vector<int32_t> tokens;  // the block's token ids: a record with other tokens is a miss
  uint64_t parent = 0;          // the previous block's key (or the root seed): checked unless 0
};

enum class LoadOutcome {
  kHit,
  kMiss,      // no record
  kRejected,  // a record that failed a check (truncated, corrupted, foreign): removed, counts as a miss
  kError,     // the read failed (EIO, ...): counts as a miss, the file is left alone
};

struct LoadResult {
  uint64_t key = 0;
  LoadOutcome outcome = LoadOutcome::kMiss;
  RecordStatus status = RecordStatus::kOk;  // why a record was rejected
  TrafficClass traffic_class = TrafficClass::kChat;
  std::vector<uint8_t> record;  // the whole record on a hit (payload() points into it)
  size_t payload_offset = 0, payload_size = 0;

  bool hit() const { return outcome == LoadOutcome::kHit; }
  std::span<const uint8_t> payload() const { return {record.data() + payload_offset, payload_size}; }
};

using LoadCallback = std::function<void(LoadResult)>;

struct ReadJob {
  LoadRequest request;
  LoadCallback done;
  int64_t submitted_ns = 0;  // steady clock, for the latency counter
};

struct ReadContext {
  std::string dir;
  Clock clock;  // stamps refreshed mtimes
  IoFaults faults;
  int64_t max_record_bytes = 0;
  StoreStats* stats = nullptr;
};

class RecordReader {
 public:
  virtual ~RecordReader() = default;
  virtual void submit(std::vector<ReadJob> jobs) = 0;  // one wake-up of the I/O thread(s) for the batch
  virtual const char* name() const = 0;
};

std::unique_ptr<RecordReader> make_pread_reader(const ReadContext& context, unsigned threads);
// nullptr when io_uring cannot be set up here (not built in, or the kernel/container refuses it).
std::unique_ptr<RecordReader> make_uring_reader(const ReadContext& context, unsigned queue_depth);

// The steps both back ends share.
struct OpenRecord {
  int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  size_t size = 0;
  std::string path;
};
// Opens and sizes the record of job.request.key. Returns false when the job is already finished
// (no record, a size no record can have, an open error); then its callback has run.
bool open_record(const ReadContext& context, ReadJob& job, OpenRecord* out);
// Checks `bytes` (read_error: 0 or the errno of the read), refreshes a hit's mtime, closes the file,
// removes a rejected record, counts, and runs the callback.
void finish_read(const ReadContext& context, ReadJob& job, OpenRecord& file, std::vector<uint8_t> bytes,
                 int read_error);
int64_t steady_now_ns();

}  // namespace dsinfer::kvstore
