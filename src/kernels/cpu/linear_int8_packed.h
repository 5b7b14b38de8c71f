// Internal to Fp4Int8Linear: the repacked layout shared by linear_int8.cpp (packing, threading) and
// linear_int8_simd.cpp (the per-target kernels).
//
// Rows in panels of 16; per panel and k-octet (8 columns) 64 bytes, byte 4r + j holding the E2M1 code
// of (row r, k 8o + j) in its low nibble and of (row r, k 8o + 4 + j) in its high nibble. A vector of
// L int32 lanes (L = 4, 8, 16) loaded from byte 4·L·v is rows L·v .. L·v + L - 1 with four consecutive k
// per lane, the operand layout of vpdpbusd / pmaddubsw + pmaddwd, once a byte shuffle has turned each
// nibble into 2·e2m1 + 12 (unsigned; the kernels subtract 12·Σq per row of x and group). Per panel and
// 32-column group: 16 half scales ws / 2, as bf16 when every half scale of the weight is a bf16 exactly
// (E8M0 scales always are), else f32. Padding rows are zero. So a product streams 4.5 bits per weight
// (was 6: int32 corrections -128·Σw2 and f32 half scales per row and group), which is what bounds it at
// 1..4 rows of x (a decode step's expert products), not the integer dots.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/linear_packed.h"

namespace dsinfer::kernels::detail {

inline constexpr int64_t kInt8PanelRows = 16;
inline constexpr int64_t kInt8Group = 32;
inline constexpr int64_t kInt8OctetBytes = 64;

struct Int8PackedWeight {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t panels = 0;
  int64_t groups = 0;  // cols / 32
  // In huge-page-advised memory (allocate_bytes): a decode step reads a few experts' panels of every
  // MoE layer, each expert smaller than a huge page.
  Bytes nibbles;  // [panels][cols / 8][64]
  int64_t nibble_bytes = 0;
  bool bf16_scales = false;  // half_scales holds bf16, else f32
  Bytes half_scales;         // [panels][groups][16]
  int64_t half_scale_bytes = 0;

  float half_scale_at(int64_t at) const;
  const uint16_t* half_scale_bf16() const { return reinterpret_cast<const uint16_t*>(half_scales.get()); }
  const float* half_scale_f32() const { return reinterpret_cast<const float*>(half_scales.get()); }

  const uint8_t* panel(int64_t p) const { return nibbles.get() + p * (cols / 8) * kInt8OctetBytes; }
};

// Computes panels [p_begin, p_end) for M rows of quantized x into y (only rows < w.rows are stored),
// with the best target of this CPU.
void int8_packed_forward(const Int8PackedWeight& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                         int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end);

// quantize_int8_blocks with the best target of this CPU (block > 0 checked by the caller).
void int8_quantize_blocks(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t block, int8_t* q, int64_t ldq,
                          float* xs, int64_t lds);

}  // namespace dsinfer::kernels::detail
