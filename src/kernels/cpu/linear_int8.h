// FP4 (E2M1) products with int8 activations: the integer product of the `--numerics fast` mode.
//
// An E2M1 weight times 2 is a small integer (0, ±1, ±2, ±3, ±4, ±6, ±8, ±12), so with activations
// quantized to int8 per block of columns (as the official reference quantizes activations before every
// FP4 product, model-v4.md §2.10) each 32-column group's dot product is an exact int32 (at most
// 127·12·32 < 2^24, so it also converts to fp32 exactly). Numerics, per output (m, n):
//   dot_g = Σ_{k in group g} q[m][k] · w2[n][k]                     (exact int32, any order)
//   c_g   = xs[m][32g / block] · (ws[n][g] / 2)                      (one fp32 rounding)
//   y     = fma(dot_G-1, c_G-1, ... fma(dot_1, c_1, fma(dot_0, c_0, 0)))   (g ascending, one rounding
//                                                                          per fused multiply-add)
// with w2 = 2·e2m1, ws the group's scale (E8M0 code or f32; halving it is exact except for f32 scales in
// the subnormal range) and q, xs from quantize_int8_blocks. Every SIMD target gives bitwise the result of
// the scalar oracle fp4_int8_reference, and an output depends on no other row of x (batch invariant).
// The integer dots run on AVX-512 VNNI (vpdpbusd) where the CPU has it, else on maddubs (AVX-512 BW,
// AVX2: a pair sum is at most 2·24·127, so the i16 saturation never triggers); other targets run the
// oracle's loop (std::fma, slow without an FMA unit; they are fallbacks only). With AVX-512 VBMI the
// 1..4-row tiles decode the nibbles with vpermb.
#pragma once

#include <cstdint>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace dsinfer::kernels {

// Activation quantization, per row m and block b of `block` columns (the last block may be shorter):
//   amax = max |x|, xs[m][b] = amax / 127, q = clamp(round_half_even(x · (127 / amax)), -127, 127).
// An all-zero block gives xs = 0 and q = 0; a block holding Inf or NaN gives xs = NaN (the products
// then give NaN, as the fp32 products would not hide such an input either).
void quantize_int8_blocks(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t block, int8_t* q,
                          int64_t ldq, float* xs, int64_t lds);

// Scales per row of quantize_int8_blocks: ceil(K / block).
int64_t int8_block_count(int64_t K, int64_t block);

// An FP4 weight repacked for int8 products. Construction validates like Linear (cols % 32 == 0, no NaN
// scale codes) and only reads the view's memory while constructing.
class Fp4Int8Linear {
 public:
  Fp4Int8Linear();
  explicit Fp4Int8Linear(const WeightView& w);
  ~Fp4Int8Linear();
  Fp4Int8Linear(Fp4Int8Linear&&) noexcept;
  Fp4Int8Linear& operator=(Fp4Int8Linear&&) noexcept;

  int64_t rows() const;
  int64_t cols() const;
  bool empty() const { return packed_ == nullptr; }
  int64_t bytes() const;  // repacked nibbles and scales

  // y[m*ldy + n] for m < M, n < rows(), from activations already quantized with `block` (a positive
  // multiple of 32). pool == nullptr: the calling thread only.
  void forward_quantized(const int8_t* q, int64_t ldq, const float* xs, int64_t lds, int64_t M, int64_t block,
                         float* y, int64_t ldy, core::ThreadPool* pool) const;

  // Quantizes x (quantize_int8_blocks) and runs forward_quantized.
  void forward(const float* x, int64_t M, int64_t ldx, int64_t block, float* y, int64_t ldy,
               core::ThreadPool* pool) const;

  struct Packed;

 private:
  std::unique_ptr<Packed> packed_;
};

// The scalar oracle: the numerics above, computed from the checkpoint layout of w.
void fp4_int8_reference(const WeightView& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds, int64_t M,
                        int64_t block, float* y, int64_t ldy);

namespace detail {
// For tests: false makes AVX-512 targets take the maddubs path even on a CPU with VNNI, so both paths
// are compared with the oracle on one machine. Not thread safe against running products.
void set_int8_vnni_allowed(bool allowed);
// For tests: false makes the VNNI path decode nibbles with pshufb even on a CPU with AVX-512 VBMI
// (vpermb), so both decodes are compared with the oracle on one machine. Not thread safe either.
void set_int8_vbmi_allowed(bool allowed);
}  // namespace detail

}  // namespace dsinfer::kernels
