#include "model/deepseek_v4/position_ring.h"

#include <algorithm>

namespace dsinfer::model::deepseek_v4 {

void PositionRing::reallocate(int64_t cap) {
  decltype(storage_) next((static_cast<size_t>(cap) * row_bytes_ + 7) / 8);
  uint8_t* dst = reinterpret_cast<uint8_t*>(next.data());
  for (int64_t p = begin_; p < end_; ++p) std::memcpy(dst + static_cast<size_t>(p % cap) * row_bytes_, row(p), row_bytes_);
  storage_.swap(next);
  capacity_ = cap;
}

void PositionRing::extend(int64_t new_end) {
  if (new_end <= end_) return;
  const int64_t needed = new_end - begin_;
  if (needed > capacity_) {
    int64_t cap = std::max<int64_t>({min_capacity_, capacity_ * 2, 1});
    while (cap < needed) cap *= 2;
    reallocate(cap);
  }
  end_ = new_end;
}

void PositionRing::shrink_for(int64_t upcoming) {
  const int64_t needed = std::max<int64_t>({min_capacity_, size() + upcoming, 1});
  if (capacity_ <= 2 * needed || capacity_ <= min_capacity_) return;
  int64_t cap = std::max<int64_t>(min_capacity_, 1);
  while (cap < needed) cap *= 2;
  reallocate(cap);
}

}  // namespace dsinfer::model::deepseek_v4
