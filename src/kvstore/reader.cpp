#include "kvstore/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace dsinfer::kvstore {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

void deliver(const ReadContext& context, ReadJob& job, LoadResult result) {
  StoreStats& s = *context.stats;
  s.loads.fetch_add(1, std::memory_order_relaxed);
  if (result.hit()) {
    s.hits.fetch_add(1, std::memory_order_relaxed);
    s.bytes_read.fetch_add(static_cast<int64_t>(result.record.size()), std::memory_order_relaxed);
  } else {
    s.misses.fetch_add(1, std::memory_order_relaxed);
    if (result.outcome == LoadOutcome::kRejected) s.rejected.fetch_add(1, std::memory_order_relaxed);
    if (result.outcome == LoadOutcome::kError) s.read_errors.fetch_add(1, std::memory_order_relaxed);
  }
  s.load_latency_ns.fetch_add(steady_now_ns() - job.submitted_ns, std::memory_order_relaxed);
  if (job.done) job.done(std::move(result));
  // Release: whoever sees the count also sees everything the callback did.
  s.loads_answered.fetch_add(1, std::memory_order_release);
}

LoadResult result_of(const ReadJob& job, LoadOutcome outcome, RecordStatus status = RecordStatus::kOk) {
  LoadResult r;
  r.key = job.request.key;
  r.outcome = outcome;
  r.status = status;
  return r;
}

}  // namespace

bool open_record(const ReadContext& context, ReadJob& job, OpenRecord* out) {
  out->path = record_path(context.dir, job.request.key);
  int fd = -1;
  int err = context.faults ? context.faults(IoOp::kOpenRead, out->path) : 0;
  if (!err) {
    fd = ::open(out->path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) err = errno;
  }
  if (err) {
    deliver(context, job, result_of(job, err == ENOENT ? LoadOutcome::kMiss : LoadOutcome::kError));
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    deliver(context, job, result_of(job, LoadOutcome::kError));
    return false;
  }
  out->fd = fd;
  out->dev = st.st_dev;
  out->ino = st.st_ino;
  // Sized against the limits before anything is allocated.
  if (st.st_size < static_cast<off_t>(kRecordHeaderBytes) || st.st_size > context.max_record_bytes) {
    ::close(fd);
    remove_if_same_file(out->path, out->dev, out->ino);
    const auto status = st.st_size < static_cast<off_t>(kRecordHeaderBytes) ? RecordStatus::kTruncated
                                                                          : RecordStatus::kBadSize;
    deliver(context, job, result_of(job, LoadOutcome::kRejected, status));
    return false;
  }
  out->size = static_cast<size_t>(st.st_size);
  return true;
}

void finish_read(const ReadContext& context, ReadJob& job, OpenRecord& file, std::vector<uint8_t> bytes,
                 int read_error) {
  if (read_error) {
    ::close(file.fd);
    deliver(context, job, result_of(job, LoadOutcome::kError));
    return;
  }
  RecordView view;
  const RecordStatus status = check_record(bytes, job.request.key, job.request.tokens, &view, job.request.parent);
  if (status != RecordStatus::kOk) {
    ::close(file.fd);
    remove_if_same_file(file.path, file.dev, file.ino);
    deliver(context, job, result_of(job, LoadOutcome::kRejected, status));
    return;
  }
  // A hit is a use: its mtime restarts the TTL (see README.md, "Lifetime"). Through the open file, so a
  // collector that has just taken the file aside sees the refresh and puts it back.
  if (!(context.faults && context.faults(IoOp::kRefresh, file.path))) set_mtime_fd(file.fd, context.clock());
  ::close(file.fd);
  LoadResult r = result_of(job, LoadOutcome::kHit);
  r.traffic_class = view.header.traffic_class;
  r.payload_offset = static_cast<size_t>(view.payload.data() - bytes.data());
  r.payload_size = view.payload.size();
  r.record = std::move(bytes);
  deliver(context, job, std::move(r));
}

namespace {

class PreadReader : public RecordReader {
 public:
  PreadReader(const ReadContext& context, unsigned threads) : context_(context) {
    for (unsigned i = 0; i < std::max(1u, threads); ++i) threads_.emplace_back([this] { loop(); });
  }
  ~PreadReader() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void submit(std::vector<ReadJob> jobs) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& job : jobs) queue_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  const char* name() const override { return "pread threads"; }

 private:
  void loop() {
    for (;;) {
      ReadJob job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and every queued read is done
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      read_one(job);
    }
  }
  void read_one(ReadJob& job) {
    OpenRecord file;
    if (!open_record(context_, job, &file)) return;
    std::vector<uint8_t> bytes(file.size);
    int err = context_.faults ? context_.faults(IoOp::kRead, file.path) : 0;
    size_t done = 0;
    while (!err && done < bytes.size()) {
      const ssize_t n = ::pread(file.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) err = errno;
      else if (n == 0) break;  // the file shrank: the record check reports it truncated
      else done += static_cast<size_t>(n);
    }
    bytes.resize(done);
    finish_read(context_, job, file, std::move(bytes), err);
  }

  ReadContext context_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ReadJob> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<RecordReader> make_pread_reader(const ReadContext& context, unsigned threads) {
  return std::make_unique<PreadReader>(context, threads);
}

}  // namespace dsinfer::kvstore
