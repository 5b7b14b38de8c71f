// Storage formats of the cached vectors (model-v4.md §3.1, exact compact formats):
//   KvCodec: window KV and main compressed KV. With the KV QDQ on, the nope dims are FP8 E4M3 codes with
//     one E8M0 scale per fp8_block values (V4: 64; exactly the reference's QDQ), the rope dims are kept in the activation type
//     (bf16 in reference numerics, fp32 in exact numerics, where rounding them would change the model).
//     With the QDQ off everything is fp32.
//   IndexKeyCodec: indexer keys, FP4 E2M1 codes + one E8M0 per block values (V4: 32; QDQ on) or fp32.
// encode() quantizes the vector in place (after it, the caller's copy equals what decode() returns) and
// writes its bytes; decode() reproduces the values bit for bit.
#pragma once

#include <cstdint>

namespace dsinfer::model::deepseek_v4 {

inline constexpr int64_t kKvFp8Block = 64;        // V4's KV FP8 block (model-v4.md §3.1)
inline constexpr int64_t kIndexKeyFp4Block = 32;  // V4's indexer key FP4 block

class KvCodec {
 public:
  KvCodec() = default;
  KvCodec(int64_t head_dim, int64_t rope_dims, bool fp8_nope, bool bf16_rope, int64_t fp8_block = kKvFp8Block);

  int64_t dim() const { return dim_; }
  int64_t bytes() const { return bytes_; }
  bool fp8_nope() const { return fp8_nope_; }
  bool bf16_rope() const { return bf16_rope_; }

  void encode(float* x, uint8_t* out) const;
  void decode(const uint8_t* in, float* x) const;

  // The row attention reads (kernels::SinkAttention's packed rows): the FP8 nope dims as bf16, which
  // holds them exactly, then the rope dims as fp32. The values of decode() in packed_bytes(), about
  // half of dim() floats. With fp32 nope dims (QDQ off), or a nope width off the kernel's alignment,
  // packed_bf16_dims() is 0 and the row is decode()'s floats.
  int64_t packed_bf16_dims() const { return packed_bf16_; }
  int64_t packed_bytes() const { return packed_bf16_ * 2 + (dim_ - packed_bf16_) * 4; }
  void decode_packed(const uint8_t* in, uint8_t* out) const;

 private:
  void decode_rope(const uint8_t* p, float* r) const;

  int64_t dim_ = 0, rope_ = 0, nope_ = 0, bytes_ = 0, block_ = kKvFp8Block, packed_bf16_ = 0;
  bool fp8_nope_ = true, bf16_rope_ = false;
};

class IndexKeyCodec {
 public:
  IndexKeyCodec() = default;
  IndexKeyCodec(int64_t dim, bool fp4, int64_t block = kIndexKeyFp4Block);

  int64_t dim() const { return dim_; }
  int64_t bytes() const { return bytes_; }
  bool fp4() const { return fp4_; }

  void encode(float* x, uint8_t* out) const;
  void decode(const uint8_t* in, float* x) const;

 private:
  int64_t dim_ = 0, bytes_ = 0, block_ = kIndexKeyFp4Block;
  bool fp4_ = true;
};

}  // namespace dsinfer::model::deepseek_v4
