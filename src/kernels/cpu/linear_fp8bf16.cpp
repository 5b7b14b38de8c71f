// FP8 × bf16 products (linear_fp8bf16.h): packing, the oracle, the x conversion, and the per-target
// kernel (vdpbf16ps where the CPU has AVX-512 BF16, else the oracle's loop on the packed layout).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_bf16dot_scalar.h"
#include "kernels/cpu/linear_fp8bf16.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_fp8bf16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef DSINFER_FP8BF16_ONCE
#define DSINFER_FP8BF16_ONCE
namespace dsinfer::kernels::detail {

constexpr int64_t kBlockPairs = kFp8Block / 2;

// bf16 bits of an E4M3 code's exact value (NaN codes never reach here: packing rejects them).
inline uint16_t fp8_bf16_bits(uint8_t code) { return core::float_to_bf16(core::fp8_e4m3_to_float(code)); }

// x as the conversion instruction reads it: fp32 subnormals are zero (sign kept), then rounded to bf16.
inline uint16_t x_bf16(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? static_cast<uint16_t>(core::float_bits(v) >> 16 & 0x8000u)
                                            : core::float_to_bf16(v);
}

// Byte of code (row r of a panel, column k) from the panel's start: per k-quad q (64 bytes, quad_stride
// apart), 128-bit lane r / 4,
// u32 r % 4 of the lane's first half for k = 4q, 4q+1 and of its second half for 4q+2, 4q+3. Byte
// unpacks of the decoded low and high bf16 bytes (vpunpck{l,h}bw, per 128-bit lane) then give u32
// lane r = the row's (k0, k1) pair and, in the second vector, its (k2, k3) pair.
inline int64_t code_offset(int64_t r, int64_t k, int64_t quad_stride) {
  const int64_t j = k % 4;
  return (k / 4) * quad_stride + 16 * (r / 4) + 2 * (r % 4) + (j / 2) * 8 + (j % 2);
}

// Rows [r0, r1) of panel p from its 16 outputs, clipped to [row_lo, row_hi).
inline void store_panel_rows(const Fp8Bf16Weight& w, int64_t p, const float* out16, float* y_row, int64_t row_lo,
                             int64_t row_hi) {
  const int64_t r0 = std::max(p * kPanelRows, row_lo), r1 = std::min({(p + 1) * kPanelRows, row_hi, w.rows});
  // A whole panel as a constant-size copy (inlined; a variable size is a call to memmove).
  if (r1 - r0 == kPanelRows) std::memcpy(y_row + r0, out16, kPanelRows * sizeof(float));
  else if (r0 < r1) std::memcpy(y_row + r0, out16 + (r0 - p * kPanelRows), (r1 - r0) * sizeof(float));
}

// Scale of panel p's rows for column block b.
inline float panel_scale(const Fp8Bf16Weight& w, int64_t p, int64_t b) {
  return w.scales[(p * kPanelRows / kFp8Block) * w.scale_cols + b];
}

bool fp8bf16_hw_allowed();

// The decode tables' bytes: low and high byte of the exact bf16 of each 7-bit magnitude (0x7F, NaN, as 0).
struct DecodeBytes {
  alignas(64) uint8_t lo[128];
  alignas(64) uint8_t hi[128];
};
inline DecodeBytes decode_bytes() {
  DecodeBytes b;
  for (int c = 0; c < 128; ++c) {
    const uint16_t v = c == 0x7F ? 0 : fp8_bf16_bits(static_cast<uint8_t>(c));
    b.lo[c] = static_cast<uint8_t>(v);
    b.hi[c] = static_cast<uint8_t>(v >> 8);
  }
  return b;
}

}  // namespace dsinfer::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels::detail {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
#define DSINFER_FP8BF16_HW __attribute__((target(HWY_TARGET_STR ",avx512bf16,avx512vbmi")))

// How far ahead of its use a panel's stream is prefetched.
constexpr int64_t kPrefetchBytes = 1024;

// Byte tables of the decode (vpermi2b over the 7 magnitude bits): low and high byte of the exact bf16.
struct DecodeTables {
  __m512i lo0, lo1, hi0, hi1;
};

// Where a decode-sized product's passes prefetch the next group of panels (lines of 64 bytes, per_step
// per step of a tile): with eight or more rows of x a step's compute outlasts its one or two lines of
// weights, and an in-panel stream kPrefetchBytes ahead leaves the first pass waiting on memory.
// Spreading the next group's stream over the current group's compute hides it (bench_linear,
// head.bf16dot and the FP8 products at M = 16).
struct NextGroupPrefetch {
  const char* at = nullptr;
  int64_t lines = 0;
  int per_step = 0;
};

// One k-quad of a panel (64 codes) into two vectors of 16 u32 lanes of bf16 pairs: a (k0, k1), b (k2, k3).
DSINFER_FP8BF16_HW HWY_INLINE void DecodeQuad(const uint8_t* p, const DecodeTables& t, __m512i* a, __m512i* b) {
  const __m512i c = _mm512_loadu_si512(p);
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, c, t.lo1);
  // high byte | the code's sign bit
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, c, t.hi1), c,
                                               _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
  *a = _mm512_unpacklo_epi8(lo, hi);
  *b = _mm512_unpackhi_epi8(lo, hi);
}

// MR rows of x × NP panels from panel p0, scale block b: MR·NP fresh vdpbf16ps chains (each weight
// decode serves MR rows, each broadcast of x NP panels), then one FMA per output into out [MR][NP][16]
// (memory, leaving the registers to the chains and the decode). xb: the block's pairs of the MR rows,
// kBlockPairs apart (the row blocks of fp8bf16_to_row_blocks), so one base register and constant
// offsets address every row's broadcast (with a row stride in a register, 16 row pointers spilled).
template <int MR, int NP>
DSINFER_FP8BF16_HW void Fp8TileHw(const Fp8Bf16Weight& w, int64_t p0, int64_t b, const uint32_t* xb,
                                  const DecodeTables& t, float* out, NextGroupPrefetch* next) {
  const uint8_t* panel[NP];
  for (int p = 0; p < NP; ++p) panel[p] = w.panel(p0 + p);
  const int64_t qs = w.quad_stride(p0);  // the tile's panels are of one stream group
  const int64_t kp0 = b * kBlockPairs, kp1 = std::min(w.pairs, kp0 + kBlockPairs);
  const uint32_t* xp = xb - kp0;  // row r's pair kp at xp[r * kBlockPairs + kp]
  constexpr int64_t xs = kBlockPairs;
  // Unrolled: as a loop GCC zeroed a 1 KB stack copy of the 16-row accumulators (rep stos) on every call.
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  const char* pf = next != nullptr ? next->at : nullptr;
  int64_t pf_lines = next != nullptr ? next->lines : 0;
  const int pf_step = next != nullptr ? next->per_step : 0;
  int64_t kp = kp0;
  for (; kp + 2 <= kp1; kp += 2) {
    __m512i wa[NP], wb[NP];
    if (pf_lines > 0) {
      for (int l = 0; l < pf_step; ++l) _mm_prefetch(pf + l * 64, _MM_HINT_T1);
      pf += pf_step * 64;
      pf_lines -= pf_step;
    }
    for (int p = 0; p < NP; ++p) {
      // One line per panel per step: the NP streams are short (a panel is 16 rows x K bytes) and
      // interleaved, which the hardware prefetchers ramp up to late. Past the end it is a no-op. Into
      // L2: NP·16 lines ahead outnumber the L1 miss buffers (as in linear_int8_simd.cpp); with T0 a
      // one-row wq_b (8192x512) took 303-315 us on one thread, with T1 228-241.
      if (next == nullptr)
        _mm_prefetch(reinterpret_cast<const char*>(panel[p] + kp / 2 * qs + kPrefetchBytes), _MM_HINT_T1);
      DecodeQuad(panel[p] + kp / 2 * qs, t, &wa[p], &wb[p]);
    }
    for (int r = 0; r < MR; ++r) {
      const __m512i xa = _mm512_set1_epi32(static_cast<int>(xp[r * xs + kp]));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)wa[p], (__m512bh)xa);
      const __m512i xb = _mm512_set1_epi32(static_cast<int>(xp[r * xs + kp + 1]));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)wb[p], (__m512bh)xb);
    }
  }
  if (kp < kp1) {  // the last pair of an odd count: the quad's second half is padding, not used
    __m512i wa[NP], wb[NP];
    for (int p = 0; p < NP; ++p) DecodeQuad(panel[p] + kp / 2 * qs, t, &wa[p], &wb[p]);
    for (int r = 0; r < MR; ++r) {
      const __m512i xa = _mm512_set1_epi32(static_cast<int>(xp[r * xs + kp]));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)wa[p], (__m512bh)xa);
    }
  }
  if (next != nullptr) {
    next->at = pf;
    next->lines = pf_lines;
  }
  for (int p = 0; p < NP; ++p) {
    const __m512 s = _mm512_set1_ps(panel_scale(w, p0 + p, b));
    for (int r = 0; r < MR; ++r) {
      float* o = out + (r * NP + p) * 16;
      _mm512_storeu_ps(o, _mm512_fmadd_ps(acc[r][p], s, _mm512_loadu_ps(o)));
    }
  }
}

// Panels [q, q_end) (of one stream group) for rows [m, m + MR) in tiles of np <= 16 / MR panels. Scale
// blocks outer, tiles inner: a block of x (MR rows × 64 pairs) stays in L1 while every tile uses it.
constexpr int kGroupPanels = kStreamGroupPanels;
// xb: row blocks of x from the tile's first row (block b at + b · kBlockPairs · rows_total).
template <int MR>
DSINFER_FP8BF16_HW void Fp8PanelsHw(const Fp8Bf16Weight& w, int64_t q, int64_t q_end, const uint32_t* xb,
                                    int64_t rows_total, const DecodeTables& t, float* y, int64_t ldy, int64_t row_lo,
                                    int64_t row_hi, NextGroupPrefetch* next) {
  constexpr int kMaxNp = MR >= 16 ? 1 : (MR >= 8 ? 2 : 4);
  alignas(64) float out[kGroupPanels * MR * 16];  // tile i: [MR][np][16] from its first panel's (p - q) * MR * 16
  int64_t tile_q[kGroupPanels];
  int tile_np[kGroupPanels], tiles = 0;
  for (int64_t p = q; p < q_end; ++tiles) {
    const int64_t left = q_end - p;
    tile_q[tiles] = p;
    tile_np[tiles] = kMaxNp >= 4 && left >= 4 ? 4 : (kMaxNp >= 2 && left >= 2 ? 2 : 1);
    p += tile_np[tiles];
  }
  std::memset(out, 0, sizeof(out));
  for (int64_t b = 0; b < w.scale_cols; ++b) {
    const uint32_t* xblock = xb + b * kBlockPairs * rows_total;
    for (int i = 0; i < tiles; ++i) {
      float* o = out + (tile_q[i] - q) * MR * 16;
      if (tile_np[i] == 4) {
        Fp8TileHw<MR, (kMaxNp >= 4 ? 4 : 1)>(w, tile_q[i], b, xblock, t, o, next);
      } else if (tile_np[i] == 2) {
        Fp8TileHw<MR, (kMaxNp >= 2 ? 2 : 1)>(w, tile_q[i], b, xblock, t, o, next);
      } else {
        Fp8TileHw<MR, 1>(w, tile_q[i], b, xblock, t, o, next);
      }
    }
  }
  for (int i = 0; i < tiles; ++i)
    for (int r = 0; r < MR; ++r)
      for (int p = 0; p < tile_np[i]; ++p)
        store_panel_rows(w, tile_q[i] + p, out + (tile_q[i] - q) * MR * 16 + (r * tile_np[i] + p) * 16, y + r * ldy,
                         row_lo, row_hi);
}

// Many rows of x (prefill): x converted once per product into column blocks (ToRowBlocks below), so
// the 64 pairs of one block of MR rows are MR·256 contiguous bytes: row-strided x at K = 2048 put every
// row of a tile into the same L1 set, and one base register addresses every row's broadcast. One call
// runs a panel against MR rows over all scale blocks (the same chains and block FMAs as Fp8TileHw, so
// the same bits), writing out [MR][16].
template <int MR>
DSINFER_FP8BF16_HW void Fp8RowTileHw(const Fp8Bf16Weight& w, int64_t p, const uint32_t* xb, int64_t block_stride,
                                     const DecodeTables& t, float* out) {
  const uint8_t* panel = w.panel(p);
  const int64_t qs = w.quad_stride(p);
  for (int r = 0; r < MR; ++r) _mm512_storeu_ps(out + r * 16, _mm512_setzero_ps());
  for (int64_t b = 0; b < w.scale_cols; ++b) {
    const int64_t kp0 = b * kBlockPairs, n = std::min(w.pairs, kp0 + kBlockPairs) - kp0;
    const uint32_t* xr = xb + b * block_stride;
    const uint8_t* wq = panel + kp0 / 2 * qs;
    __m512 acc[MR];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) {
      __m512i wa, wb;
      DecodeQuad(wq + i / 2 * qs, t, &wa, &wb);
      // Every row's first pair, then every row's second: the MR chains interleave.
      for (int r = 0; r < MR; ++r)
        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)wa, (__m512bh)_mm512_set1_epi32(static_cast<int>(xr[r * kBlockPairs + i])));
      for (int r = 0; r < MR; ++r)
        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)wb,
                                  (__m512bh)_mm512_set1_epi32(static_cast<int>(xr[r * kBlockPairs + i + 1])));
    }
    if (i < n) {  // the last pair of an odd count: the quad's second half is padding, not used
      __m512i wa, wb;
      DecodeQuad(wq + i / 2 * qs, t, &wa, &wb);
      for (int r = 0; r < MR; ++r)
        acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)wa, (__m512bh)_mm512_set1_epi32(static_cast<int>(xr[r * kBlockPairs + i])));
    }
    const __m512 s = _mm512_set1_ps(panel_scale(w, p, b));
    // The outputs wait in memory (out), leaving the registers to the chains and the decode.
    for (int r = 0; r < MR; ++r) _mm512_storeu_ps(out + r * 16, _mm512_fmadd_ps(acc[r], s, _mm512_loadu_ps(out + r * 16)));
  }
}

// Rows [m0, m1) of the converted x against panels [pb, pe): groups of kRowGroupPanels panels (L2
// resident) pass every 16-row tile of x before the next group, so each tile of x (16 × K bf16) is
// read from memory once per group and reused by its panels from L2.
constexpr int64_t kRowGroupPanels = 8;
template <int MR>
DSINFER_FP8BF16_HW void Fp8RowTilesHw(const Fp8Bf16Weight& w, int64_t q, int64_t q_end, const uint32_t* xb,
                                      int64_t block_stride, const DecodeTables& t, float* y, int64_t ldy,
                                      int64_t row_lo, int64_t row_hi) {
  alignas(64) float out[MR * 16];
  for (int64_t p = q; p < q_end; ++p) {
    Fp8RowTileHw<MR>(w, p, xb, block_stride, t, out);
    const int64_t r0 = p * kPanelRows;
    if (r0 >= row_lo && r0 + kPanelRows <= std::min(row_hi, w.rows)) {
      // A whole panel: one vector per row (store_panel_rows' memcpy of a variable size is a call).
      for (int r = 0; r < MR; ++r) _mm512_storeu_ps(y + r * ldy + r0, _mm512_load_ps(out + r * 16));
    } else {
      for (int r = 0; r < MR; ++r) store_panel_rows(w, p, out + r * 16, y + r * ldy, row_lo, row_hi);
    }
  }
}

DSINFER_FP8BF16_HW void Fp8RowsHw(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t rows_total, int64_t m0,
                                  int64_t m1, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
  static const DecodeBytes bytes = decode_bytes();
  const DecodeTables t{_mm512_load_si512(bytes.lo), _mm512_load_si512(bytes.lo + 64), _mm512_load_si512(bytes.hi),
                       _mm512_load_si512(bytes.hi + 64)};
  const int64_t pb = row_lo / kPanelRows, pe = (row_hi + kPanelRows - 1) / kPanelRows;
  const int64_t block_stride = rows_total * kBlockPairs;
  for (int64_t p = pb; p < pe; p += kRowGroupPanels) {
    const int64_t q_end = std::min(pe, p + kRowGroupPanels);
    for (int64_t m = m0; m < m1;) {
      const int64_t left = m1 - m;
      const uint32_t* xm = xblocks + m * kBlockPairs;
      float* ym = y + (m - m0) * ldy;
      if (left >= 16) {
        Fp8RowTilesHw<16>(w, p, q_end, xm, block_stride, t, ym, ldy, row_lo, row_hi);
        m += 16;
      } else if (left >= 8) {
        Fp8RowTilesHw<8>(w, p, q_end, xm, block_stride, t, ym, ldy, row_lo, row_hi);
        m += 8;
      } else if (left >= 4) {
        Fp8RowTilesHw<4>(w, p, q_end, xm, block_stride, t, ym, ldy, row_lo, row_hi);
        m += 4;
      } else {
        Fp8RowTilesHw<1>(w, p, q_end, xm, block_stride, t, ym, ldy, row_lo, row_hi);
        m += 1;
      }
    }
  }
}

// x to bf16 sixteen at a time (vcvtneps2bf16: round to nearest even, subnormal inputs read as zero);
// returns how many columns it converted.
DSINFER_FP8BF16_HW int64_t ToBf16Hw(const float* x, int64_t cols, void* out) {
  int64_t k = 0;
  for (; k + 16 <= cols; k += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + k));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(out) + k), (__m256i)b);
  }
  return k;
}
#endif

// Scalar fallback on the packed layout and the row blocks of x (rows [m0, m1) of rows_total; y points at
// row m0): the oracle's loop.
void ForwardScalar(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t rows_total, int64_t m0, int64_t m1,
                   float* y, int64_t ldy, int64_t pb, int64_t pe, int64_t row_lo, int64_t row_hi) {
  uint32_t lanes[kBlockPairs];
  float out[kPanelRows];
  for (int64_t p = pb; p < pe; ++p) {
    const uint8_t* panel = w.panel(p);
    const int64_t qs = w.quad_stride(p);
    for (int64_t m = m0; m < m1; ++m) {
      for (int64_t r = 0; r < kPanelRows; ++r) {
        float acc = 0.0f;
        for (int64_t b = 0; b < w.scale_cols; ++b) {
          const int64_t kp0 = b * kBlockPairs, n = std::min(w.pairs, kp0 + kBlockPairs) - kp0;
          for (int64_t i = 0; i < n; ++i) {
            const int64_t k = 2 * (kp0 + i);
            lanes[i] = fp8_bf16_bits(panel[code_offset(r, k, qs)]) |
                       (uint32_t{fp8_bf16_bits(panel[code_offset(r, k + 1, qs)])} << 16);
          }
          const uint32_t* xr = xblocks + (b * rows_total + m) * kBlockPairs;
          acc = std::fma(bf16dot_scalar(lanes, 1, xr, n), panel_scale(w, p, b), acc);
        }
        out[r] = acc;
      }
      store_panel_rows(w, p, out, y + (m - m0) * ldy, row_lo, row_hi);
    }
  }
}

// M rows of x in row blocks (ToRowBlocks), a decode-sized product.
void Fp8Bf16Forward(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t M, float* y, int64_t ldy,
                    int64_t row_lo, int64_t row_hi) {
  const int64_t pb = row_lo / kPanelRows, pe = (row_hi + kPanelRows - 1) / kPanelRows;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  if (fp8bf16_hw_allowed()) {
    // Built once: a decode step runs hundreds of these products' tasks, each a few microseconds.
    static const DecodeBytes bytes = decode_bytes();
    const DecodeTables t{_mm512_load_si512(bytes.lo), _mm512_load_si512(bytes.lo + 64),
                         _mm512_load_si512(bytes.hi), _mm512_load_si512(bytes.hi + 64)};
    // Groups of 4 panels (64 rows × K bytes, cache resident) pass every row of x before the next group.
    // With 8 or more rows every tile step prefetches ceil(np / passes) lines of the next group (np
    // panels decoded per step, passes of x over the group), so the passes end with it in L2.
    const int64_t passes = M / 16 + (M % 16 >= 8) + (M % 8 >= 4) + (M % 4 >= 2) + (M % 2);
    const int np_max = M >= 16 ? 1 : (M >= 8 ? 2 : 4);
    for (int64_t p = pb, q_end = 0; p < pe; p = q_end) {
      q_end = std::min(pe, (p / kGroupPanels + 1) * kGroupPanels);  // to the end of p's stream group
      NextGroupPrefetch next;
      NextGroupPrefetch* next_ptr = nullptr;
      if (M >= 8) {
        next.at = reinterpret_cast<const char*>(w.panel(q_end));
        next.lines = std::min<int64_t>(pe - q_end, kGroupPanels) * w.panel_bytes / 64;
        next.per_step = static_cast<int>((np_max + passes - 1) / passes);
        next_ptr = &next;
      }
      for (int64_t m = 0; m < M;) {
        const int64_t left = M - m;
        const uint32_t* xm = xblocks + m * kBlockPairs;
        float* ym = y + m * ldy;
        if (left >= 16) {
          Fp8PanelsHw<16>(w, p, q_end, xm, M, t, ym, ldy, row_lo, row_hi, next_ptr);
          m += 16;
        } else if (left >= 8) {
          Fp8PanelsHw<8>(w, p, q_end, xm, M, t, ym, ldy, row_lo, row_hi, next_ptr);
          m += 8;
        } else if (left >= 4) {
          Fp8PanelsHw<4>(w, p, q_end, xm, M, t, ym, ldy, row_lo, row_hi, next_ptr);
          m += 4;
        } else if (left >= 2) {
          Fp8PanelsHw<2>(w, p, q_end, xm, M, t, ym, ldy, row_lo, row_hi, next_ptr);
          m += 2;
        } else {
          Fp8PanelsHw<1>(w, p, q_end, xm, M, t, ym, ldy, row_lo, row_hi, next_ptr);
          m += 1;
        }
      }
    }
    return;
  }
#endif
  ForwardScalar(w, xblocks, M, 0, M, y, ldy, pb, pe, row_lo, row_hi);
}

typedef uint16_t __attribute__((may_alias)) U16Alias;

// x rows to bf16 pairs (xp[m][kp] = bf16(x[2kp]) | bf16(x[2kp+1]) << 16, a zero partner for odd cols).
void ToPairs(const float* x, int64_t M, int64_t ldx, int64_t cols, int64_t pairs, uint32_t* xp) {
  for (int64_t m = 0; m < M; ++m) {
    const float* xr = x + m * ldx;
    auto* out = reinterpret_cast<U16Alias*>(xp + m * pairs);
    int64_t k = 0;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
    if (fp8bf16_hw_allowed()) k = ToBf16Hw(xr, cols, out);
#endif
    for (; k < cols; ++k) out[k] = x_bf16(xr[k]);
    if (cols % 2 != 0) out[cols] = 0;
  }
}

// x rows to column blocks: block b of row m at out[(b·M + m)·64], its pairs as ToPairs
// makes them (a zero partner for an odd last column).
void ToRowBlocks(const float* x, int64_t M, int64_t ldx, int64_t cols, uint32_t* out) {
  const int64_t blocks = (cols + kFp8Block - 1) / kFp8Block;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kFp8Block, n = std::min(cols, c0 + kFp8Block) - c0;
      ToPairs(x + m * ldx + c0, 1, ldx, n, (n + 1) / 2, out + (b * M + m) * kBlockPairs);
    }
}

// Rows [m0, m1) of the converted x; rows_total = the M it was converted with.
void Fp8Bf16ForwardRows(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t rows_total, int64_t m0, int64_t m1,
                        float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  if (fp8bf16_hw_allowed()) {
    Fp8RowsHw(w, xblocks, rows_total, m0, m1, y, ldy, row_lo, row_hi);
    return;
  }
#endif
  // Elsewhere the oracle's loop (tests; callers take this path only on the hardware).
  ForwardScalar(w, xblocks, rows_total, m0, m1, y, ldy, row_lo / kPanelRows, (row_hi + kPanelRows - 1) / kPanelRows,
                row_lo, row_hi);
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>

namespace dsinfer::kernels {

namespace detail {

bool fp8bf16_hw_allowed() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return vbmi && bf16dot_hardware();
#else
  return false;
#endif
}

HWY_EXPORT(Fp8Bf16Forward);
HWY_EXPORT(Fp8Bf16ForwardRows);
HWY_EXPORT(ToRowBlocks);

namespace {

void check_fp8(const WeightView& w) {
  DSINFER_CHECK(w.format == WeightFormat::kFP8 && w.rows > 0 && w.cols > 0 && w.data != nullptr &&
                    w.scales != nullptr,
                "fp8 bf16 linear ", w.name, ": needs a non-empty FP8 weight with scales, not ",
                weight_format_name(w.format));
}

// The block scale of element (n, k), validated (weight_at's value).
float block_scale(const WeightView& w, int64_t rb, int64_t cb, int64_t scale_cols) {
  const int64_t i = rb * scale_cols + cb;
  if (w.scales_f32) {
    const float s = static_cast<const float*>(w.scales)[i];
    DSINFER_CHECK(std::isfinite(s), "linear '", w.name, "': FP8 block scale [", rb, ", ", cb, "] is not finite (", s,
                  ")");
    return s;
  }
  const uint8_t code = static_cast<const uint8_t*>(w.scales)[i];
  DSINFER_CHECK(code != 0xFF, "linear '", w.name, "': FP8 block scale [", rb, ", ", cb, "] is the E8M0 NaN code 0xFF");
  return core::e8m0_to_float(code);
}

}  // namespace

std::unique_ptr<Fp8Bf16Weight> pack_fp8bf16(const WeightView& w) {
  check_fp8(w);
  auto p = std::make_unique<Fp8Bf16Weight>();
  p->rows = w.rows;
  p->cols = w.cols;
  p->panels = (w.rows + kPanelRows - 1) / kPanelRows;
  p->pairs = (w.cols + 1) / 2;
  p->panel_bytes = (p->pairs + 1) / 2 * 64;  // whole k-quads
  p->scale_cols = (w.cols + kFp8Block - 1) / kFp8Block;
  const int64_t row_blocks = (w.rows + kFp8Block - 1) / kFp8Block;
  p->scales.reset(new float[row_blocks * p->scale_cols]);
  for (int64_t rb = 0; rb < row_blocks; ++rb)
    for (int64_t cb = 0; cb < p->scale_cols; ++cb)
      p->scales[rb * p->scale_cols + cb] = block_scale(w, rb, cb, p->scale_cols);
  p->data = allocate_bytes(p->panels * p->panel_bytes);  // zeroed: padding rows and the odd partner
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t n = 0; n < w.rows; ++n) {
    const uint8_t* row = src + n * w.cols;
    uint8_t* dst = p->data.get() + p->panel_offset(n / kPanelRows);
    const int64_t qs = p->quad_stride(n / kPanelRows);
    for (int64_t k = 0; k < w.cols; ++k) {
      DSINFER_CHECK((row[k] & 0x7F) != 0x7F, "linear '", w.name, "': weight [", n, ", ", k,
                    "] is the FP8 E4M3 NaN code 0x", (row[k] == 0xFF ? "FF" : "7F"));
      dst[code_offset(n % kPanelRows, k, qs)] = row[k];
    }
  }
  return p;
}

void fp8bf16_forward(const Fp8Bf16Weight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                     int64_t row_lo, int64_t row_hi) {
  if (M <= 0 || row_lo >= row_hi) return;
  // Not thread_local: a task of a nested parallel region may run another product on this thread.
  std::unique_ptr<uint32_t[]> xb(new uint32_t[static_cast<size_t>(fp8bf16_row_blocks_size(w, M))]);
  HWY_DYNAMIC_DISPATCH(ToRowBlocks)(x, M, ldx, w.cols, xb.get());
  HWY_DYNAMIC_DISPATCH(Fp8Bf16Forward)(w, xb.get(), M, y, ldy, row_lo, row_hi);
}

int64_t fp8bf16_row_blocks_size(const Fp8Bf16Weight& w, int64_t M) { return w.scale_cols * M * kBlockPairs; }

void fp8bf16_to_row_blocks(const Fp8Bf16Weight& w, const float* x, int64_t M, int64_t ldx, uint32_t* out) {
  if (M > 0) HWY_DYNAMIC_DISPATCH(ToRowBlocks)(x, M, ldx, w.cols, out);
}

void fp8bf16_forward_row_blocks(const Fp8Bf16Weight& w, const uint32_t* xblocks, int64_t rows_total, int64_t m0,
                                int64_t m1, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
  if (m0 >= m1 || row_lo >= row_hi) return;
  HWY_DYNAMIC_DISPATCH(Fp8Bf16ForwardRows)(w, xblocks, rows_total, m0, m1, y, ldy, row_lo, row_hi);
}

}  // namespace detail

bool fp8bf16_hardware() { return detail::fp8bf16_hw_allowed(); }

void fp8bf16_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy) {
  using detail::kFp8Block;
  detail::check_fp8(w);
  const int64_t pairs = (w.cols + 1) / 2, scale_cols = (w.cols + kFp8Block - 1) / kFp8Block;
  std::vector<uint32_t> xp(M * pairs), lanes(pairs);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t kp = 0; kp < pairs; ++kp) {
      const uint16_t lo = detail::x_bf16(x[m * ldx + 2 * kp]);
      const uint16_t hi = 2 * kp + 1 < w.cols ? detail::x_bf16(x[m * ldx + 2 * kp + 1]) : uint16_t{0};
      xp[m * pairs + kp] = lo | (uint32_t{hi} << 16);
    }
  const auto* codes = static_cast<const uint8_t*>(w.data);
  for (int64_t n = 0; n < w.rows; ++n) {
    for (int64_t kp = 0; kp < pairs; ++kp) {
      const uint16_t lo = detail::fp8_bf16_bits(codes[n * w.cols + 2 * kp]);
      const uint16_t hi = 2 * kp + 1 < w.cols ? detail::fp8_bf16_bits(codes[n * w.cols + 2 * kp + 1]) : uint16_t{0};
      lanes[kp] = lo | (uint32_t{hi} << 16);
    }
    for (int64_t m = 0; m < M; ++m) {
      float acc = 0.0f;
      for (int64_t b = 0; b < scale_cols; ++b) {
        const int64_t kp0 = b * detail::kBlockPairs, count = std::min(pairs, kp0 + detail::kBlockPairs) - kp0;
        const float d = detail::bf16dot_scalar(lanes.data() + kp0, 1, xp.data() + m * pairs + kp0, count);
        acc = std::fma(d, detail::block_scale(w, n / kFp8Block, b, scale_cols), acc);
      }
      y[m * ldy + n] = acc;
    }
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
