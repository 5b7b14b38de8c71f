// FP8 (E4M3, 128×128 block scales) weights times bf16-rounded activations on AVX-512 BF16 (vdpbf16ps):
// the FP8 products of `--numerics fast` (a kernels::Linear built with Fp8Products::kBf16Dot). At 16
// rows of x the exact fp32 products run at the FMA peak; vdpbf16ps does twice the multiply-adds per
// instruction, and the weights stay one byte each in memory (decoded to bf16 in registers).
//
// Numerics, per output (m, n), with xb = bf16(daz(x)) (round to nearest even; fp32 subnormals read as
// zero, as the conversion instruction reads them), the FP8 codes decoded to bf16 exactly (every E4M3
// value is a normal bf16 or zero, so no scale is folded into the weight) and the scale blocks b of 128
// columns ascending:
//   d_b = the vdpbf16ps chain over the block's k-pairs from 0 (linear_bf16dot.h: the odd element of
//         each pair first, one rounding per step, subnormals flushed to zero)
//   y   = fma(d_B-1, s_B-1, ... fma(d_1, s_1, fma(d_0, s_0, 0)))   (fused multiply-adds, b ascending)
// with s_b the block's scale (E8M0 or f32) of row n. An odd cols gets a zero pair partner. Every target
// gives bitwise the scalar oracle fp8bf16_reference; an output depends on no other row of x and not on
// the thread count (batch invariant). Targets without AVX-512 BF16 run the oracle's loop (slow: callers
// ask for this product only where fp8bf16_hardware()).
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_packed.h"

namespace dsinfer::kernels {

// Whether the products run on vdpbf16ps on this CPU (AVX-512 BF16 and VBMI, whose vpermi2b decodes the
// codes; tests turn it off with detail::set_bf16dot_hw_allowed).
bool fp8bf16_hardware();

// The scalar oracle of the numerics above, from the checkpoint layout of an FP8 weight.
void fp8bf16_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy);

namespace detail {

// The repacked weight: panels of 16 rows in stream groups (linear_packed.h), per k-quad 64 bytes of a panel's codes in the
// order the decode's byte unpacks want (linear_fp8bf16.cpp, code_offset). Scales f32
// [ceil(rows/128)][ceil(cols/128)].
struct Fp8Bf16Weight {
  int64_t rows = 0, cols = 0, panels = 0, pairs = 0;
  int64_t panel_bytes = 0;  // 64 per k-quad
  int64_t scale_cols = 0;   // ceil(cols / 128)
  Bytes data;
  std::unique_ptr<float[]> scales;

  // Panel p's first k-quad; its k-quad j at + j * quad_stride(p) (stream groups, linear_packed.h).
  int64_t panel_offset(int64_t p) const { return stream_group_offset(p, panel_bytes); }
  const uint8_t* panel(int64_t p) const { return data.get() + panel_offset(p); }
  int64_t quad_stride(int64_t p) const { return stream_group_width(p, panels) * 64; }
  int64_t bytes() const { return panels * panel_bytes + ((rows + kFp8Block - 1) / kFp8Block) * scale_cols * 4; }
};

// Validates like Linear (no NaN codes, finite scales, naming the weight and the position) and repacks.
std::unique_ptr<Fp8Bf16Weight> pack_fp8bf16(const WeightView& w);

// y rows [row_lo, row_hi) (absolute; the panels covering them are computed, only rows in the range
// stored) for M rows of x, on the calling thread, with the best target of this CPU.
void fp8bf16_forward(const Fp8Bf16Weight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                     int64_t row_lo, int64_t row_hi);

// Many rows of x (prefill): x converted to bf16 once per product, in column blocks of 128 (u32 pairs
// [ceil(cols/128)][M][64]), which every task of the product then reads (fp8bf16_forward converts all
// of its x in each call). Results are bitwise those of fp8bf16_forward.
int64_t fp8bf16_row_blocks_size(const Fp8Bf16Weight& w, int64_t M);  // u32 elements
void fp8bf16_to_row_blocks(const Fp8Bf16Weight& w, const float* x, int64_t M, int64_t ldx, uint32_t* out);
// y rows [row_lo, row_hi) for rows [m0, m1) of the converted x (rows_total: its M); y points at row m0.
void fp8bf16_forward_row_blocks(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t rows_total, int64_t m0,
                                int64_t m1, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi);

}  // namespace detail
}  // namespace dsinfer::kernels
