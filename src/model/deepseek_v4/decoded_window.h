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
#include <vector>

namespace dsinfer::model::deepseek_v4 {

class DecodedWindow {
 public:
  // Sizes the rows on first use: capacity positions of dim floats.
  void ensure(int64_t capacity, int64_t dim) {
    if (capacity_ == capacity && dim_ == dim) return;
    capacity_ = capacity;
    dim_ = dim;
    rows_.assign(static_cast<size_t>(capacity * dim), 0.0f);
    tags_.assign(static_cast<size_t>(capacity), -1);
  }
  int64_t capacity() const { return capacity_; }
  bool holds(int64_t pos) const { return capacity_ > 0 && tags_[slot(pos)] == pos; }
  float* row(int64_t pos) { return rows_.data() + slot(pos) * dim_; }
  const float* row(int64_t pos) const { return rows_.data() + slot(pos) * dim_; }
  // The slot of pos now holds pos's row (the caller wrote it) / holds nothing.
  void mark(int64_t pos) { tags_[slot(pos)] = pos; }
  void clear() { std::fill(tags_.begin(), tags_.end(), -1); }
  size_t bytes() const { return rows_.size() * sizeof(float) + tags_.size() * sizeof(int64_t); }

 private:
  size_t slot(int64_t pos) const { return static_cast<size_t>(pos % capacity_); }

  int64_t capacity_ = 0, dim_ = 0;
  std::vector<float> rows_;
  std::vector<int64_t> tags_;
};

}  // namespace dsinfer::model::deepseek_v4
