// Internal to the bf16 dot products (linear_bf16dot.cpp, linear_fp8bf16.cpp): the scalar model of one
// vdpbf16ps chain, which both oracles and the fallbacks of targets without AVX-512 BF16 use.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/dtypes.h"

namespace dsinfer::kernels::detail {

// The instruction's view of a bf16: subnormals are zero.
inline float bf16_daz(uint16_t b) {
  return (b & 0x7F80) == 0 ? core::bits_float((b & 0x8000u) << 16) : core::bf16_to_float(b);
}
inline float ftz(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
inline uint32_t bf16_pair(float lo, float hi) {
  return core::float_to_bf16(lo) | (uint32_t{core::float_to_bf16(hi)} << 16);
}

// One chain over `pairs` k-pairs: the weight's pair lanes (stride apart) against x's pairs, the odd
// element of each pair first, each step rounded once and flushed to zero as the instruction does.
inline float bf16dot_scalar(const uint32_t* w, int64_t stride, const uint32_t* xp, int64_t pairs) {
  float acc = 0.0f;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const uint32_t a = w[kp * stride], b = xp[kp];
    acc = ftz(acc + bf16_daz(static_cast<uint16_t>(a >> 16)) * bf16_daz(static_cast<uint16_t>(b >> 16)));
    acc = ftz(acc + bf16_daz(static_cast<uint16_t>(a)) * bf16_daz(static_cast<uint16_t>(b)));
  }
  return acc;
}

}  // namespace dsinfer::kernels::detail
