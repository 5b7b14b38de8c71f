// fp32 copies of one layer's window KV rows, kept between steps for the decode steps' attention.
//
// A decode step reads the last W window rows of every layer; decoding them from their stored codes
// (KvCodec) every step cost as much compute as the step's own attention and, at 16 sequences, wrote
// and re-read megabytes of decoded rows per layer. Here the step's own row is copied as it is encoded
// (the encoder leaves the caller's vector equal to what decode() returns) and older rows are decoded
// once. Slot p % capacity holds the decoded row of position p while its tag is p.
//
// Invariant the forward keeps (attention.cpp): every write of a window row either stores its decoded
// copy here or drops the slot's tag, and a snapshot restore drops every tag (SequenceState::restore),
// so a tagged slot always equals decode(window row).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace dsinfer::model::deepseek_v4 {

class DecodedWindow {
 public:
  DecodedWindow() = default;
  DecodedWindow(DecodedWindow&&) noexcept = default;
  DecodedWindow& operator=(DecodedWindow&&) noexcept = default;
  // A copied state keeps its copies (only the tagged rows are defined, so only those are copied).
  DecodedWindow(const DecodedWindow& o) { *this = o; }
  DecodedWindow& operator=(const DecodedWindow& o) {
    if (this == &o) return *this;
    capacity_ = 0;
    dim_ = 0;
    rows_.reset();
    tags_.clear();
    if (o.capacity_ == 0) return *this;
    ensure(o.capacity_, o.dim_);
    tags_ = o.tags_;
    for (int64_t pos : tags_)
      if (pos >= 0) std::copy(o.row(pos), o.row(pos) + dim_, row(pos));
    return *this;
  }

  // Sizes the rows on first use: capacity positions of dim floats.
  void ensure(int64_t capacity, int64_t dim) {
    if (capacity_ == capacity && dim_ == dim) return;
    capacity_ = capacity;
    dim_ = dim;
    // Uninitialised: a row is written before its tag claims it (no memset of every new sequence's rows).
    rows_.reset(new float[static_cast<size_t>(capacity * dim)]);
    tags_.assign(static_cast<size_t>(capacity), -1);
  }
  int64_t capacity() const { return capacity_; }
  bool holds(int64_t pos) const { return capacity_ > 0 && tags_[slot(pos)] == pos; }
  float* row(int64_t pos) { return rows_.get() + slot(pos) * dim_; }
  const float* row(int64_t pos) const { return rows_.get() + slot(pos) * dim_; }
  // The slot of pos now holds pos's row (the caller wrote it) / holds nothing.
  void mark(int64_t pos) { tags_[slot(pos)] = pos; }
  void clear() { std::fill(tags_.begin(), tags_.end(), -1); }
  size_t bytes() const { return static_cast<size_t>(capacity_ * dim_) * sizeof(float) + tags_.size() * sizeof(int64_t); }

 private:
  size_t slot(int64_t pos) const { return static_cast<size_t>(pos % capacity_); }

  int64_t capacity_ = 0, dim_ = 0;
  std::unique_ptr<float[]> rows_;
  std::vector<int64_t> tags_;
};

}  // namespace dsinfer::model::deepseek_v4
