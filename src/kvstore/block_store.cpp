#include "kvstore/block_store.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"
#include "kvstore/record.h"

namespace dsinfer::kvstore {

BlockStore::BlockStore(StoreOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = system_clock();
  struct stat st;
  if (::stat(options_.dir.c_str(), &st) != 0) {
    DSINFER_LOG_WARN("kvstore: store directory ", options_.dir, " does not exist; creating it");
    if (int err = make_dirs(options_.dir, options_.faults)) {
      // Reads just miss; the writer retries after the backoff, so a mount that appears later is used.
      DSINFER_LOG_WARN("kvstore: cannot create ", options_.dir, ": ", std::strerror(err), "; writes disabled for now");
      on_write_fault(err);
    }
  }
  ReadContext context{options_.dir, options_.clock, options_.faults, options_.max_record_bytes, &stats_};
  if (options_.read_backend != ReadBackend::kPread) reader_ = make_uring_reader(context, options_.queue_depth);
  if (!reader_) {
    if (options_.read_backend == ReadBackend::kUring) {
      DSINFER_LOG_WARN("kvstore: io_uring requested but not available here; using pread threads");
    }
    reader_ = make_pread_reader(context, options_.pread_threads);
  }
  DSINFER_LOG_INFO("kvstore: ", options_.dir, ": reads through ", reader_->name());
  writer_ = std::thread([this] { writer_loop(); });
}

BlockStore::~BlockStore() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
  reader_.reset();
}

bool BlockStore::put(uint64_t key, std::span<const int32_t> tokens, std::vector<uint8_t> payload,
                     TrafficClass traffic_class, uint64_t parent) {
  const auto bytes = static_cast<int64_t>(payload.size() + tokens.size() * sizeof(int32_t));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (disabled_until_ns_ != 0 && options_.clock() < disabled_until_ns_) {
      stats_.dropped_disabled.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (queue_.size() >= options_.max_queued_writes || queued_bytes_ + bytes > options_.max_queued_bytes) {
      stats_.dropped_writes.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(WriteJob{key, {tokens.begin(), tokens.end()}, std::move(payload), traffic_class, parent});
    queued_bytes_ += bytes;
  }
  stats_.writes_queued.fetch_add(1, std::memory_order_relaxed);
  cv_.notify_one();
  return true;
}

void BlockStore::load(LoadRequest request, LoadCallback done) {
  std::vector<ReadJob> jobs;
  jobs.push_back(ReadJob{std::move(request), std::move(done), steady_now_ns()});
  reader_->submit(std::move(jobs));
}

void BlockStore::load_batch(std::vector<LoadRequest> requests, LoadCallback done) {
  std::vector<ReadJob> jobs;
  jobs.reserve(requests.size());
  const int64_t now = steady_now_ns();
  for (auto& r : requests) jobs.push_back(ReadJob{std::move(r), done, now});
  reader_->submit(std::move(jobs));
}

std::future<LoadResult> BlockStore::load(LoadRequest request) {
  auto promise = std::make_shared<std::promise<LoadResult>>();
  auto future = promise->get_future();
  load(std::move(request), [promise](LoadResult r) { promise->set_value(std::move(r)); });
  return future;
}

void BlockStore::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

GcReport BlockStore::collect_garbage(int64_t capacity_bytes) {
  GcOptions gc;
  gc.ttl = options_.ttl;
  gc.capacity_bytes = capacity_bytes;
  return kvstore::collect_garbage(options_.dir, gc, options_.clock, &stats_);
}

bool BlockStore::writes_enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return disabled_until_ns_ == 0 || options_.clock() >= disabled_until_ns_;
}

void BlockStore::writer_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    WriteJob job = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= static_cast<int64_t>(job.payload.size() + job.tokens.size() * sizeof(int32_t));
    const bool disabled = disabled_until_ns_ != 0 && options_.clock() < disabled_until_ns_;
    writing_ = true;
    lock.unlock();
    if (disabled) stats_.dropped_disabled.fetch_add(1, std::memory_order_relaxed);
    else write_one(job);
    lock.lock();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void BlockStore::write_one(const WriteJob& job) {
  const std::string path = record_path(options_.dir, job.key);
  const int64_t now = options_.clock();
  // Stored already (by this or another process): the put is a use of that record, nothing to write.
  if (struct stat st; ::stat(path.c_str(), &st) == 0) {
    set_mtime(path, now);
    stats_.writes_existing.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const auto bytes = encode_record(job.key, job.tokens, job.payload, job.traffic_class, now, job.parent);
  int err = write_record_file(path, bytes, now, options_.fsync, options_.faults);
  if (err == ENOENT) {  // the first record of its fan-out directory
    err = make_dirs(record_dir(options_.dir, job.key), options_.faults);
    if (!err) err = write_record_file(path, bytes, now, options_.fsync, options_.faults);
  }
  if (!err) {
    stats_.records_written.fetch_add(1, std::memory_order_relaxed);
    stats_.bytes_written.fetch_add(static_cast<int64_t>(bytes.size()), std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mutex_);
    backoff_ns_ = 0;
    return;
  }
  stats_.write_errors.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mutex_);
  on_write_fault(err);
}

// Called with mutex_ held (or before the threads start).
void BlockStore::on_write_fault(int err) {
  const int64_t now = options_.clock();
  backoff_ns_ = backoff_ns_ == 0 ? options_.backoff_initial_ns : std::min(2 * backoff_ns_, options_.backoff_max_ns);
  disabled_until_ns_ = now + backoff_ns_;
  DSINFER_LOG_WARN("kvstore: write to ", options_.dir, " failed: ", std::strerror(err), "; writes off for ",
                   backoff_ns_ / kNsPerSecond, " s");
}

}  // namespace dsinfer::kvstore
