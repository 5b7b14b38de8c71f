#include "model/deepseek_v41/kv_rows.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/qdq.h"
#include "model/deepseek_v41/numerics.h"

namespace dsinfer::model::deepseek_v41::detail {

KvRows::KvRows(int64_t dim, RowCodec codec, int64_t keep) : dim_(dim), keep_(keep), codec_(codec) {
  DSINFER_CHECK(dim > 0 && dim % kKvQdqBlock == 0, "V4.1 cache rows of ", dim, " values (blocks of ", kKvQdqBlock,
                ")");
}

int64_t KvRows::code_bytes() const { return codec_ == RowCodec::kFp4E4m3 ? dim_ / 2 : dim_; }
int64_t KvRows::scale_bytes() const { return codec_ == RowCodec::kFp4E4m3 ? dim_ / kCkvScaleBlock : dim_ / kKvQdqBlock; }

void KvRows::grow(int64_t n) {
  codes_.resize(static_cast<size_t>((n_ + n) * code_bytes()));
  scales_.resize(static_cast<size_t>((n_ + n) * scale_bytes()));
}

void KvRows::append(const float* rows, int64_t n) { add(rows, n, false); }
void KvRows::append_stored(const float* rows, int64_t n) { add(rows, n, true); }

void KvRows::add(const float* rows, int64_t n, bool stored) {
  if (codec_ == RowCodec::kFp32) {
    raw_.insert(raw_.end(), rows, rows + n * dim_);
    n_ += n;
    return;
  }
  grow(n);
  uint8_t* codes = codes_.data() + n_ * code_bytes();
  uint8_t* scales = scales_.data() + n_ * scale_bytes();
  bool exact = true;
  if (codec_ == RowCodec::kFp8E8m0) {
    // Also for stored rows: re-encoding FP8 values with power-of-two scales finds them again.
    kernels::fp8_block_encode(rows, n * dim_, kKvQdqBlock, codes, scales);
  } else if (stored) {
    exact = fp4_e4m3_scale_encode_exact(rows, n * dim_, codes, scales);
  } else {
    fp4_e4m3_scale_encode(rows, n * dim_, codes, scales);
  }
  const int64_t first = n_;
  n_ += n;
  if (stored && exact) {
    const std::vector<float> back = decode(first, n_);
    exact = std::memcmp(back.data(), rows, back.size() * sizeof(float)) == 0;
  }
  if (!exact) {
    truncate(first);
    DSINFER_CHECK(false, "V4.1 state range: cache rows not on the QDQ grid of this sequence's codec");
  }
  if (keep_ < 0) return;
  // Rows before first - keep_ are read no more: drop them from the copy once they are as many as those
  // kept (each row moved at most once on average). What attention reads is what is stored: decoded.
  if (const int64_t drop = first - keep_ - r0_; drop > keep_) {
    recent_.erase(recent_.begin(), recent_.begin() + drop * dim_);
    r0_ += drop;
  }
  recent_.resize(static_cast<size_t>((n_ - r0_) * dim_));
  decode(first, n_, recent_.data() + (first - r0_) * dim_);
}

void KvRows::pad_to(int64_t n) {
  if (n <= n_) return;
  const std::vector<float> zeros(static_cast<size_t>((n - n_) * dim_), 0.0f);
  append(zeros.data(), n - n_);
}

void KvRows::truncate(int64_t n) {
  DSINFER_CHECK(n >= 0 && n <= n_, "V4.1 cache rows: truncate to ", n, " of ", n_, " rows");
  n_ = n;
  if (codec_ == RowCodec::kFp32) {
    raw_.resize(static_cast<size_t>(n * dim_));
    return;
  }
  codes_.resize(static_cast<size_t>(n * code_bytes()));
  scales_.resize(static_cast<size_t>(n * scale_bytes()));
  if (keep_ < 0) return;
  if (const int64_t need = std::max<int64_t>(0, n - keep_); need < r0_) {
    decode_recent(need);
  } else {
    recent_.resize(static_cast<size_t>((n - r0_) * dim_));
  }
}

void KvRows::decode_recent(int64_t from) {
  r0_ = from;
  recent_.resize(static_cast<size_t>((n_ - from) * dim_));
  decode(from, n_, recent_.data());
}

const float* KvRows::row(int64_t i) const {
  if (codec_ == RowCodec::kFp32) return raw_.data() + i * dim_;
  DSINFER_CHECK_INTERNAL(keep_ >= 0 && i >= r0_ && i < n_, "V4.1 cache rows: row ", i, " is not in the recent rows [",
                         r0_, ", ", n_, ")");
  return recent_.data() + (i - r0_) * dim_;
}

void KvRows::decode(int64_t begin, int64_t end, float* out) const {
  DSINFER_CHECK(begin >= 0 && begin <= end && end <= n_, "V4.1 cache rows: [", begin, ", ", end, ") of ", n_);
  if (codec_ == RowCodec::kFp32) {
    std::copy(raw_.begin() + begin * dim_, raw_.begin() + end * dim_, out);
    return;
  }
  const uint8_t* codes = codes_.data() + begin * code_bytes();
  const uint8_t* scales = scales_.data() + begin * scale_bytes();
  if (codec_ == RowCodec::kFp8E8m0) {
    kernels::fp8_block_decode(codes, scales, (end - begin) * dim_, kKvQdqBlock, out);
  } else {
    fp4_e4m3_scale_decode(codes, scales, (end - begin) * dim_, out);
  }
}

std::vector<float> KvRows::decode(int64_t begin, int64_t end) const {
  std::vector<float> out(static_cast<size_t>((end - begin) * dim_));
  decode(begin, end, out.data());
  return out;
}

int64_t KvRows::bytes() const {
  return codec_ == RowCodec::kFp32 ? static_cast<int64_t>(raw_.size() * sizeof(float))
                                   : static_cast<int64_t>(codes_.size() + scales_.size());
}

}  // namespace dsinfer::model::deepseek_v41::detail
