// Fixed-size rows addressed by absolute position, holding a contiguous live range [begin, end). Used for
// the window KV rings and the compressor tails. The capacity grows when a long chunk needs more rows than
// the steady state (so every position of the last forward call stays addressable for rollback) and is
// reused afterwards: steady-state decode never allocates.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace dsinfer::model::deepseek_v4 {

class PositionRing {
 public:
  PositionRing() = default;
  PositionRing(size_t row_bytes, int64_t min_capacity) : row_bytes_(row_bytes), min_capacity_(min_capacity) {}

  size_t row_bytes() const { return row_bytes_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int64_t size() const { return end_ - begin_; }
  bool contains(int64_t pos) const { return pos >= begin_ && pos < end_; }
  size_t capacity_bytes() const { return static_cast<size_t>(capacity_) * row_bytes_; }
  size_t live_bytes() const { return static_cast<size_t>(size()) * row_bytes_; }

  uint8_t* row(int64_t pos) { return data() + static_cast<size_t>(pos % capacity_) * row_bytes_; }
  const uint8_t* row(int64_t pos) const { return data() + static_cast<size_t>(pos % capacity_) * row_bytes_; }
  float* frow(int64_t pos) { return reinterpret_cast<float*>(row(pos)); }
  const float* frow(int64_t pos) const { return reinterpret_cast<const float*>(row(pos)); }

  // Empties the ring; the next row appended is `pos`.
  void reset(int64_t pos) { begin_ = end_ = pos; }
  // Forgets rows before pos.
  void drop_before(int64_t pos) {
    if (pos > begin_) begin_ = pos < end_ ? pos : end_;
  }
  // Forgets rows at and after pos (pos >= begin).
  void truncate(int64_t pos) {
    if (pos < end_) end_ = pos > begin_ ? pos : begin_;
  }
  // Makes room for positions [end, new_end) (contents undefined) and extends the live range.
  void extend(int64_t new_end);
  // Releases memory a long chunk left behind when the next `upcoming` rows fit in far less.
  void shrink_for(int64_t upcoming);

 private:
  void reallocate(int64_t cap);
  uint8_t* data() { return reinterpret_cast<uint8_t*>(storage_.data()); }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(storage_.data()); }

  size_t row_bytes_ = 0;
  int64_t min_capacity_ = 0;
  int64_t capacity_ = 0;
  int64_t begin_ = 0, end_ = 0;
  // Leaves new elements uninitialised (a plain vector would zero them): growing the rings for a long
  // chunk (tails of 4-8 KB per position on MEDIUM) was then a serial memset of tens of MB in
  // begin_step; the rows are written by the forward, on every thread, before anything reads them.
  template <typename T>
  struct UninitAllocator : std::allocator<T> {
    template <typename U>
    struct rebind {
      using other = UninitAllocator<U>;
    };
    UninitAllocator() = default;
    template <typename U>
    UninitAllocator(const UninitAllocator<U>&) noexcept {}
    template <typename U>
    void construct(U* p) noexcept {
      ::new (static_cast<void*>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U* p, Args&&... args) {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  };
  std::vector<uint64_t, UninitAllocator<uint64_t>> storage_;  // 8-byte aligned rows of fp32 or bytes
};

}  // namespace dsinfer::model::deepseek_v4
