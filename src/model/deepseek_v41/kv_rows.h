// Rows of a V4.1 cache (model-v41.md §3.1) kept for every position or entry, for rollback and state
// ranges, in the spec's compact form when the KV QDQ is on, exact since the rows kept are QDQ'd values:
// the window KV as FP8 E4M3 codes + an E8M0 scale per 32 (528 B at head_dim 512), the compressed KV as
// FP4 E2M1 codes + an E4M3 scale per 16 (288 B); fp32 as computed when the QDQ is off. The window also
// keeps an fp32 copy of its recent rows, the only ones attention reads (a position attends to the
// sliding_window - 1 before it), decoded once when appended; compressed entries, read at random by
// the selections, are decoded on read.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer::model::deepseek_v41::detail {

enum class RowCodec {
  kFp32,     // QDQ off
  kFp8E8m0,  // window KV: kernels::fp8_block_encode, block kKvQdqBlock
  kFp4E4m3,  // compressed KV: fp4_e4m3_scale_encode (numerics.h)
};

class KvRows {
 public:
  KvRows() = default;
  // keep >= 0: the fp32 copy of the last `keep` rows before size() and of those appended since.
  KvRows(int64_t dim, RowCodec codec, int64_t keep = -1);

  int64_t size() const { return n_; }
  bool fp32() const { return codec_ == RowCodec::kFp32; }
  // Appends n rows [n, dim] as computed: stores their QDQ (compact codecs) or themselves (kFp32).
  void append(const float* rows, int64_t n);
  // Appends rows already QDQ'd (a state range's decoded rows), stored exactly (throws if not on the grid).
  void append_stored(const float* rows, int64_t n);
  void pad_to(int64_t n);  // zero rows up to n
  // The first n rows stay; the recent copy is rebuilt from the codes where it no longer reaches back.
  void truncate(int64_t n);
  // Row i in fp32: kFp32, or within the recent copy.
  const float* row(int64_t i) const;
  // Rows [begin, end) decoded into out [end - begin, dim].
  void decode(int64_t begin, int64_t end, float* out) const;
  std::vector<float> decode(int64_t begin, int64_t end) const;
  // Bytes of the per-position storage (codes and scales, or fp32 rows), not of the recent copy.
  int64_t bytes() const;

 private:
  void add(const float* rows, int64_t n, bool stored);
  void grow(int64_t n);  // room for n more rows of codes and scales
  void decode_recent(int64_t from);
  int64_t code_bytes() const;   // per row
  int64_t scale_bytes() const;  // per row

  int64_t dim_ = 0, keep_ = -1;
  RowCodec codec_ = RowCodec::kFp32;
  int64_t n_ = 0;
  std::vector<float> raw_;               // kFp32: every row
  std::vector<uint8_t> codes_, scales_;  // compact: [n, code_bytes()], [n, scale_bytes()]
  std::vector<float> recent_;            // compact with keep >= 0: rows [r0_, n_) decoded
  int64_t r0_ = 0;
};

}  // namespace dsinfer::model::deepseek_v41::detail
