// The io_uring back end: one thread owns the ring, opens files (open is cheap next to the read on a
// local disk; on a FUSE mount it is a metadata round trip, which is why reads are batched), keeps up to
// queue_depth reads in flight and submits them with one system call per batch.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "core/log.h"
#include "kvstore/reader.h"

#ifdef DSINFER_KVSTORE_HAVE_URING
#include <liburing.h>
#endif

namespace dsinfer::kvstore {

#ifdef DSINFER_KVSTORE_HAVE_URING
namespace {

class UringReader : public RecordReader {
 public:
  UringReader(const ReadContext& context, unsigned depth, io_uring ring)
      : context_(context), depth_(depth), ring_(ring), slots_(depth) {
    for (unsigned i = 0; i < depth_; ++i) free_.push_back(i);
    thread_ = std::thread([this] { loop(); });
  }
  ~UringReader() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    io_uring_queue_exit(&ring_);
  }
  void submit(std::vector<ReadJob> jobs) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& job : jobs) queue_.push_back(std::move(job));
    }
    cv_.notify_one();
  }
  const char* name() const override { return "io_uring"; }

 private:
  struct Slot {
    ReadJob job;
    OpenRecord file;
    std::vector<uint8_t> bytes;
    size_t done = 0;
  };

  void loop() {
    for (;;) {
      std::deque<ReadJob> batch;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (free_.size() == depth_) {
          cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
          if (queue_.empty()) return;  // stopping with nothing queued or in flight
        }
        while (!queue_.empty() && batch.size() < free_.size()) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      bool queued = false;
      for (auto& job : batch) {
        OpenRecord file;
        if (!open_record(context_, job, &file)) continue;
        const unsigned index = free_.back();
        free_.pop_back();
        Slot& slot = slots_[index];
        slot.job = std::move(job);
        slot.file = file;
        slot.bytes.assign(file.size, 0);
        slot.done = 0;
        if (int err = context_.faults ? context_.faults(IoOp::kRead, file.path) : 0) {
          complete(index, err);
          continue;
        }
        queue_read(index);
        queued = true;
      }
      if (queued) io_uring_submit(&ring_);
      if (free_.size() < depth_) reap();
    }
  }

  void queue_read(unsigned index) {
    Slot& slot = slots_[index];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: at most depth_ reads are in flight
    io_uring_prep_read(sqe, slot.file.fd, slot.bytes.data() + slot.done,
                       static_cast<unsigned>(slot.bytes.size() - slot.done), slot.done);
    io_uring_sqe_set_data64(sqe, index);
  }

  // Waits for at least one completion, then handles every completion that is ready.
  void reap() {
    io_uring_cqe* cqe = nullptr;
    int rc = io_uring_wait_cqe(&ring_, &cqe);
    if (rc == -EINTR) return;
    bool resubmitted = false;
    while (rc == 0 && cqe) {
      const auto index = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      Slot& slot = slots_[index];
      if (res == -EINTR || res == -EAGAIN) {
        queue_read(index);
        resubmitted = true;
      } else if (res < 0) {
        complete(index, -res);
      } else if (res > 0 && slot.done + static_cast<size_t>(res) < slot.bytes.size()) {
        slot.done += static_cast<size_t>(res);  // a short read: ask for the rest
        queue_read(index);
        resubmitted = true;
      } else {
        slot.done += static_cast<size_t>(res);
        complete(index, 0);
      }
      cqe = nullptr;
      rc = io_uring_peek_cqe(&ring_, &cqe);
    }
    if (resubmitted) io_uring_submit(&ring_);
  }

  void complete(unsigned index, int err) {
    Slot& slot = slots_[index];
    slot.bytes.resize(slot.done);  // a file that shrank under us reads as truncated
    ReadJob job = std::move(slot.job);
    finish_read(context_, job, slot.file, std::move(slot.bytes), err);
    slot.bytes = {};
    free_.push_back(index);
  }

  ReadContext context_;
  const unsigned depth_;
  io_uring ring_;
  std::vector<Slot> slots_;
  std::vector<unsigned> free_;  // owned by the ring thread
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ReadJob> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<RecordReader> make_uring_reader(const ReadContext& context, unsigned queue_depth) {
  io_uring ring;
  const unsigned depth = std::max(1u, queue_depth);
  if (int rc = io_uring_queue_init(depth, &ring, 0); rc < 0) {
    DSINFER_LOG_DEBUG("kvstore: io_uring_queue_init failed: errno ", -rc);
    return nullptr;
  }
  return std::make_unique<UringReader>(context, depth, ring);
}

#else

std::unique_ptr<RecordReader> make_uring_reader(const ReadContext&, unsigned) { return nullptr; }

#endif

}  // namespace dsinfer::kvstore
