#include "model/deepseek_v4/kv_codec.h"

#include <cstring>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/qdq.h"
#include "kernels/cpu/sink_attention.h"

namespace dsinfer::model::deepseek_v4 {

KvCodec::KvCodec(int64_t head_dim, int64_t rope_dims, bool fp8_nope, bool bf16_rope, int64_t fp8_block)
    : dim_(head_dim), rope_(rope_dims), nope_(head_dim - rope_dims), block_(fp8_block), fp8_nope_(fp8_nope),
      bf16_rope_(bf16_rope) {
  DSINFER_CHECK(block_ > 0 && nope_ >= 0 && (!fp8_nope || nope_ % block_ == 0), "KV nope dims (", nope_,
                ") must be a multiple of the FP8 block ", block_);
  bytes_ = (fp8_nope_ ? nope_ + nope_ / block_ : nope_ * 4) + rope_ * (bf16_rope_ ? 2 : 4);
  packed_bf16_ = fp8_nope_ && nope_ % kernels::kSinkPackedAlign == 0 ? nope_ : 0;
}

void KvCodec::encode(float* x, uint8_t* out) const {
  uint8_t* p = out;
  if (fp8_nope_) {
    kernels::fp8_block_encode(x, nope_, block_, p, p + nope_);
    kernels::fp8_block_decode_scalar(p, p + nope_, nope_, block_, x);
    p += nope_ + nope_ / block_;
  } else {
    std::memcpy(p, x, nope_ * 4);
    p += nope_ * 4;
  }
  float* r = x + nope_;
  if (bf16_rope_) {
    for (int64_t i = 0; i < rope_; ++i) {
      const uint16_t b = core::float_to_bf16(r[i]);
      std::memcpy(p + 2 * i, &b, 2);
      r[i] = core::bf16_to_float(b);
    }
  } else {
    std::memcpy(p, r, rope_ * 4);
  }
}

void KvCodec::decode_rope(const uint8_t* p, float* r) const {
  if (bf16_rope_) {
    for (int64_t i = 0; i < rope_; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      r[i] = core::bf16_to_float(b);
    }
  } else {
    std::memcpy(r, p, rope_ * 4);
  }
}

void KvCodec::decode(const uint8_t* in, float* x) const {
  const uint8_t* p = in;
  if (fp8_nope_) {
    kernels::fp8_block_decode(p, p + nope_, nope_, block_, x);
    p += nope_ + nope_ / block_;
  } else {
    std::memcpy(x, p, nope_ * 4);
    p += nope_ * 4;
  }
  float* r = x + nope_;
  decode_rope(p, r);
}

void KvCodec::decode_packed(const uint8_t* in, uint8_t* out) const {
  if (packed_bf16_ == 0) {
    decode(in, reinterpret_cast<float*>(out));
    return;
  }
  kernels::fp8_block_decode_bf16(in, in + nope_, nope_, block_, reinterpret_cast<uint16_t*>(out));
  const uint8_t* p = in + nope_ + nope_ / block_;
  float* r = reinterpret_cast<float*>(out + 2 * nope_);
  decode_rope(p, r);
}

IndexKeyCodec::IndexKeyCodec(int64_t dim, bool fp4, int64_t block) : dim_(dim), block_(block), fp4_(fp4) {
  DSINFER_CHECK(block_ > 0 && block_ % 2 == 0 && (!fp4 || dim % block_ == 0), "indexer key dim (", dim,
                ") must be a multiple of the FP4 block ", block_);
  bytes_ = fp4_ ? dim / 2 + dim / block_ : dim * 4;
}

void IndexKeyCodec::encode(float* x, uint8_t* out) const {
  if (fp4_) {
    kernels::fp4_block_encode(x, dim_, block_, out, out + dim_ / 2);
    kernels::fp4_block_decode(out, out + dim_ / 2, dim_, block_, x);
  } else {
    std::memcpy(out, x, dim_ * 4);
  }
}

void IndexKeyCodec::decode(const uint8_t* in, float* x) const {
  if (fp4_) {
    kernels::fp4_block_decode(in, in + dim_ / 2, dim_, block_, x);
  } else {
    std::memcpy(x, in, dim_ * 4);
  }
}

}  // namespace dsinfer::model::deepseek_v4
