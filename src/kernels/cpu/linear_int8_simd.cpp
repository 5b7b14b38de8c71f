// Per-target kernels of Fp4Int8Linear (compiled once per Highway target, chosen at run time).
//
// The integer work has no Highway op in the Highway this project builds with (1.0 has neither
// SumOfMulQuadAccumulate nor an AVX-512 VNNI target by default), so the x86 targets use the
// instructions directly on the target's native vectors: one int32 lane per output row, four k per
// lane. Weights: a byte shuffle maps each nibble to 2·e2m1 + 12 (0..24, the unsigned operand).
// Activations: four q bytes broadcast to every lane (signed operand). Dot: vpdpbusd where the CPU has
// AVX-512 VNNI, else pmaddubsw + pmaddwd (AVX-512 BW, AVX2; exact: |pair sum| <= 2·24·127 < 2^15). The
// group's int32 sum starts at -12·Σq, one number per row of x and group whatever the output row, so it is
// exactly Σ q·w2 (linear_int8.h), whatever the instruction, and the weights need no correction terms of
// their own (4.5 bits per weight streamed with bf16 half scales). The fp32 tail
// (convert, one product, one fused multiply-add per group, groups ascending) is the oracle's, lane by
// lane. Targets without AVX2 (SSE4, EMU128, scalar: fallbacks only) run the oracle's loop on the packed
// layout, with std::fma. Where the CPU also has AVX-512 VBMI the nibbles are decoded with vpermb, which
// reads only the low 6 bits of each index: 3 operations per 64 weight bytes instead of pshufb's 5 (no
// difference was measurable on the development VM, where these products are bound by memory; the
// decode is most of their instructions, which matters where memory is faster).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/linear_int8.h"
#include "kernels/cpu/linear_int8_packed.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_int8_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef DSINFER_INT8_TABLE_ONCE
#define DSINFER_INT8_TABLE_ONCE
namespace dsinfer::kernels::detail {
// 2·e2m1 of each 4-bit code, the pshufb table, once per 128-bit block of the widest vector.
#define DSINFER_E2M1X2 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12
alignas(64) inline constexpr int8_t kInt8E2M1x2[64] = {DSINFER_E2M1X2, DSINFER_E2M1X2, DSINFER_E2M1X2, DSINFER_E2M1X2};
#undef DSINFER_E2M1X2
// 2·e2m1 + 12 (unsigned bytes), the table of the SIMD kernels.
inline constexpr int kInt8WeightOffset = 12;
#define DSINFER_E2M1X2P 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0
alignas(64) inline constexpr uint8_t kInt8E2M1x2Plus12[64] = {DSINFER_E2M1X2P, DSINFER_E2M1X2P, DSINFER_E2M1X2P,
                                                              DSINFER_E2M1X2P};
#undef DSINFER_E2M1X2P
bool int8_vnni_allowed();
bool int8_vbmi_allowed();
}  // namespace dsinfer::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels::detail {
namespace HWY_NAMESPACE {

// Stores the 16 accumulated rows of panel p for M rows of x (rows >= w.rows are padding).
HWY_INLINE void StoreRows(const Int8PackedWeight& w, int64_t p, int64_t M, const float* acc, float* y, int64_t ldy) {
  const int64_t r0 = p * kInt8PanelRows;
  const int64_t count = std::min<int64_t>(kInt8PanelRows, w.rows - r0);
  if (count == kInt8PanelRows) {  // a constant size: vector moves, not a call per row
    for (int64_t m = 0; m < M; ++m) std::memcpy(y + m * ldy + r0, acc + m * kInt8PanelRows, kInt8PanelRows * sizeof(float));
    return;
  }
  for (int64_t m = 0; m < M; ++m) std::memcpy(y + m * ldy + r0, acc + m * kInt8PanelRows, count * sizeof(float));
}

#if HWY_ARCH_X86 && (HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX2)
#define DSINFER_INT8_SIMD 1

#if HWY_TARGET == HWY_AVX3
using VI = __m512i;
using VFl = __m512;
constexpr int kL = 16;
HWY_INLINE VI LoadI(const void* p) { return _mm512_loadu_si512(p); }
HWY_INLINE VI Set32(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
HWY_INLINE VI Mask0F() { return _mm512_set1_epi8(0x0F); }
HWY_INLINE VI Table() { return _mm512_load_si512(kInt8E2M1x2Plus12); }
HWY_INLINE VI AndI(VI a, VI b) { return _mm512_and_si512(a, b); }
HWY_INLINE VI Srl4(VI a) { return _mm512_srli_epi16(a, 4); }
HWY_INLINE VI Shuffle(VI table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
HWY_INLINE VI DotMaddubs(VI acc, VI a, VI b) {
  return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(a, b), _mm512_set1_epi16(1)));
}
// The zero-masked form: GCC 12 warns (falsely) about the _mm512_undefined_ps inside _mm512_cvtepi32_ps.
HWY_INLINE VFl Cvt(VI a) { return _mm512_maskz_cvtepi32_ps(static_cast<__mmask16>(0xFFFF), a); }
HWY_INLINE VFl LoadF(const float* p) { return _mm512_loadu_ps(p); }
HWY_INLINE void StoreF(float* p, VFl v) { _mm512_storeu_ps(p, v); }
HWY_INLINE VFl SetF(float v) { return _mm512_set1_ps(v); }
HWY_INLINE VFl MulF(VFl a, VFl b) { return _mm512_mul_ps(a, b); }
HWY_INLINE VFl MulAddF(VFl a, VFl b, VFl c) { return _mm512_fmadd_ps(a, b, c); }
// The zero-masked form again (the same false GCC 12 warning).
HWY_INLINE VFl LoadBf16(const uint16_t* p) {
  constexpr __mmask16 kAll = 0xFFFF;
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}
#else  // AVX2
using VI = __m256i;
using VFl = __m256;
constexpr int kL = 8;
HWY_INLINE VI LoadI(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE VI Set32(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
HWY_INLINE VI Mask0F() { return _mm256_set1_epi8(0x0F); }
HWY_INLINE VI Table() { return _mm256_load_si256(reinterpret_cast<const __m256i*>(kInt8E2M1x2Plus12)); }
HWY_INLINE VI AndI(VI a, VI b) { return _mm256_and_si256(a, b); }
HWY_INLINE VI Srl4(VI a) { return _mm256_srli_epi16(a, 4); }
HWY_INLINE VI Shuffle(VI table, VI idx) { return _mm256_shuffle_epi8(table, idx); }
HWY_INLINE VI DotMaddubs(VI acc, VI a, VI b) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
}
HWY_INLINE VFl Cvt(VI a) { return _mm256_cvtepi32_ps(a); }
HWY_INLINE VFl LoadF(const float* p) { return _mm256_loadu_ps(p); }
HWY_INLINE void StoreF(float* p, VFl v) { _mm256_storeu_ps(p, v); }
HWY_INLINE VFl SetF(float v) { return _mm256_set1_ps(v); }
HWY_INLINE VFl MulF(VFl a, VFl b) { return _mm256_mul_ps(a, b); }
HWY_INLINE VFl MulAddF(VFl a, VFl b, VFl c) { return _mm256_fmadd_ps(a, b, c); }
HWY_INLINE VFl LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#endif
HWY_INLINE VFl LoadHalfScale(const Int8PackedWeight& w, int64_t at) {
  return w.bf16_scales ? LoadBf16(w.half_scale_bf16() + at) : LoadF(w.half_scale_f32() + at);
}
constexpr int kNV = static_cast<int>(kInt8PanelRows / kL);  // vectors per panel

// Groups ahead of the one being computed whose packed nibbles and half scales are prefetched. A
// panel's group is 256 bytes read once, a tile reads PG panels (and their scales) as separate short
// streams, and an expert's product (1..4 rows, 288 KiB) is over before the hardware prefetchers have
// ramped up on them: without this the tiles stalled on the loads (most of their profile samples sat on
// them), with it a 1..4-row product of the MEDIUM experts took 20-40 % less CPU time (bench_linear).
// Into L2 (prefetcht1), not L1: eight groups ahead are ~160 lines in flight, more than the core's L1
// miss buffers, so T0 prefetches held one thread to ~12 GB/s (a 1-row 512x1024 product 21-24 us,
// 13-15 us with T1; 4 or 16 groups ahead with T1 were not better).
constexpr int64_t kPrefetchGroups = 8;

// Prefetches group g of panels [p, p + count) (those that exist); past the last group, the next
// panels' first groups, where a tile or panel loop goes next.
HWY_INLINE void PrefetchGroup(const Int8PackedWeight& w, int64_t p, int64_t count, int64_t g) {
  if (g >= w.groups) {
    p += count;
    g -= w.groups;
    if (g >= w.groups) return;
  }
  const int64_t scale_bytes = w.bf16_scales ? 2 : 4;
  for (int64_t i = p; i < std::min(p + count, w.panels); ++i) {
    const uint8_t* nibbles = w.panel(i) + g * 4 * kInt8OctetBytes;
    for (int64_t line = 0; line < 4 * kInt8OctetBytes; line += 64) __builtin_prefetch(nibbles + line, 0, 2);
    __builtin_prefetch(w.half_scales.get() + (i * w.groups + g) * kInt8PanelRows * scale_bytes, 0, 2);
  }
}

// The nibble decode of one 64-byte load into 2·e2m1 + 12 of its low (lo) and high (hi) nibbles: pshufb
// zeroes a byte whose index has bit 7 set, so both nibbles are masked first.
HWY_INLINE void DecodeShuffle(VI table, VI mask, VI raw, VI& lo, VI& hi) {
  lo = Shuffle(table, AndI(raw, mask));
  hi = Shuffle(table, AndI(Srl4(raw), mask));
}

// One group of panel p, decoded for the panel kernels: its 32 columns as 8 quads of kNV vectors of
// 2·e2m1 + 12 (wv) and their half scales (ws). Loads and shuffles only, so it inlines into the VNNI
// and the maddubs kernels alike.
HWY_INLINE void DecodePanelGroup(const Int8PackedWeight& w, int64_t p, int64_t g, VI table, VI mask,
                                 VI (&wv)[8][kNV], VFl (&ws)[kNV]) {
  const uint8_t* panel = w.panel(p);
  for (int o = 0; o < 4; ++o)
    for (int v = 0; v < kNV; ++v)
      DecodeShuffle(table, mask, LoadI(panel + (g * 4 + o) * kInt8OctetBytes + v * kL * 4), wv[2 * o][v],
                    wv[2 * o + 1][v]);
  const int64_t at = (p * w.groups + g) * kInt8PanelRows;
  for (int v = 0; v < kNV; ++v) ws[v] = LoadHalfScale(w, at + v * kL);
}

// The panel kernel for more than kTileMaxRows rows of x (prefill, larger batches): per group the
// panel's 32 columns are decoded once (8 quads of kNV vectors) and serve every row of x, whose fp32
// sums live in `acc`. Per lane the same operations as the tiles, so the results are bitwise the same
// (measured against chunks of 4 or 8 rows in the tiles, which decode again per chunk: as fast at 16
// rows, slower at 8).
#define DSINFER_INT8_PANEL_KERNEL(NAME, ATTR, DOT)                                                            \
  ATTR void NAME(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs,         \
                 int64_t lds, const int32_t* qc, int64_t M, int64_t block, float* acc) {                       \
    const VI table = Table(), mask = Mask0F();                                                                 \
    for (int64_t i = 0; i < M * kInt8PanelRows; ++i) acc[i] = 0.0f;                                            \
    for (int64_t g = 0; g < w.groups; ++g) {                                                                   \
      PrefetchGroup(w, p, 1, g + kPrefetchGroups);                                                             \
      VI wv[8][kNV];                                                                                           \
      VFl ws[kNV];                                                                                             \
      DecodePanelGroup(w, p, g, table, mask, wv, ws);                                                          \
      for (int64_t m = 0; m < M; ++m) {                                                                        \
        const int8_t* qm = q + m * ldq + g * kInt8Group;                                                       \
        VI dot[kNV];                                                                                           \
        for (int v = 0; v < kNV; ++v) dot[v] = Set32(static_cast<uint32_t>(qc[m * w.groups + g]));             \
        for (int i = 0; i < 8; ++i) {                                                                          \
          uint32_t word;                                                                                       \
          std::memcpy(&word, qm + (i / 2) * 8 + (i % 2) * 4, 4);                                               \
          const VI a = Set32(word);                                                                            \
          for (int v = 0; v < kNV; ++v) dot[v] = DOT(dot[v], wv[i][v], a);                                     \
        }                                                                                                      \
        const VFl x_scale = SetF(xs[m * lds + g * kInt8Group / block]);                                        \
        float* am = acc + m * kInt8PanelRows;                                                                  \
        for (int v = 0; v < kNV; ++v) {                                                                        \
          const VFl c = MulF(x_scale, ws[v]);                                                                  \
          StoreF(am + v * kL, MulAddF(Cvt(dot[v]), c, LoadF(am + v * kL)));                                   \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
  }

// The panel kernel for prefill-sized M (more than kPanelRowsMin rows of x: an expert's rows of a
// prompt): as the panel kernel, but four rows of x at a time, so that four independent chains are in
// flight (the eight dots of one row and group depend on each other, which left the single-row loop
// waiting on their latency). The same operations per lane in the same order, so the same bits.
#define DSINFER_INT8_PANEL_ROWS_KERNEL(NAME, ATTR, DOT)                                                       \
  template <int R>                                                                                           \
  ATTR HWY_INLINE void NAME##Block(const VI (*wv)[kNV], const VFl* ws, const int8_t* q, int64_t ldq,          \
                                   const float* xs, int64_t lds, const int32_t* qc, int64_t groups, int64_t g, \
                                   int64_t block, float* acc) {                                              \
    VI dot[R][kNV];                                                                                          \
    for (int r = 0; r < R; ++r)                                                                              \
      for (int v = 0; v < kNV; ++v) dot[r][v] = Set32(static_cast<uint32_t>(qc[r * groups + g]));           \
    for (int i = 0; i < 8; ++i) {                                                                            \
      for (int r = 0; r < R; ++r) {                                                                          \
        uint32_t word;                                                                                       \
        std::memcpy(&word, q + r * ldq + g * kInt8Group + (i / 2) * 8 + (i % 2) * 4, 4);                     \
        const VI a = Set32(word);                                                                            \
        for (int v = 0; v < kNV; ++v) dot[r][v] = DOT(dot[r][v], wv[i][v], a);                               \
      }                                                                                                      \
    }                                                                                                        \
    for (int r = 0; r < R; ++r) {                                                                            \
      const VFl x_scale = SetF(xs[r * lds + g * kInt8Group / block]);                                        \
      float* am = acc + r * kInt8PanelRows;                                                                  \
      for (int v = 0; v < kNV; ++v)                                                                          \
        StoreF(am + v * kL, MulAddF(Cvt(dot[r][v]), MulF(x_scale, ws[v]), LoadF(am + v * kL)));              \
    }                                                                                                        \
  }                                                                                                          \
  ATTR void NAME(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs,         \
                 int64_t lds, const int32_t* qc, int64_t M, int64_t block, float* acc) {                       \
    const VI table = Table(), mask = Mask0F();                                                                 \
    for (int64_t i = 0; i < M * kInt8PanelRows; ++i) acc[i] = 0.0f;                                            \
    for (int64_t g = 0; g < w.groups; ++g) {                                                                   \
      PrefetchGroup(w, p, 1, g + kPrefetchGroups);                                                             \
      VI wv[8][kNV];                                                                                           \
      VFl ws[kNV];                                                                                             \
      DecodePanelGroup(w, p, g, table, mask, wv, ws);                                                          \
      int64_t m = 0;                                                                                           \
      for (; m + 4 <= M; m += 4)                                                                               \
        NAME##Block<4>(wv, ws, q + m * ldq, ldq, xs + m * lds, lds, qc + m * w.groups, w.groups, g, block,     \
                       acc + m * kInt8PanelRows);                                                             \
      for (; m < M; ++m)                                                                                       \
        NAME##Block<1>(wv, ws, q + m * ldq, ldq, xs + m * lds, lds, qc + m * w.groups, w.groups, g, block,     \
                       acc + m * kInt8PanelRows);                                                             \
    }                                                                                                          \
  }

// From this many rows of x the four-row panel kernel runs (up to it the single-row one, M = 5..16).
constexpr int64_t kPanelRowsMin = 17;

// Rows of x up to which the tile kernel below runs (decode: the rows routed to one expert); more rows
// take the panel kernel above.
constexpr int64_t kTileMaxRows = 4;

// Panels per tile for MR rows of x: the MR · PG · kNV int32 dots and as many fp32 sums stay in
// registers (32 on AVX-512, 16 on AVX2) beside one decoded vector per panel vector.
constexpr int TilePanels(int MR) { return kNV == 1 ? (MR <= 2 ? 4 : 2) : (MR == 1 ? 2 : 1); }

// The tile kernel for 1..kTileMaxRows rows of x: PG panels at once, so the 8 dependent dots of one
// group overlap with the other PG · kNV - 1 vectors' chains, and the fp32 sums stay in registers over
// all groups. Each lane runs the oracle's operations in its order (int32 dot from -12·Σq, then per
// group one product and one fused multiply-add, groups ascending), so the results are bitwise the
// oracle's whatever the tile. It is a macro, not a template on the dot, because the VNNI instances must
// be compiled with avx512vnni and the maddubs instance must not be: with VNNI enabled the compiler may
// fuse pmaddwd + paddd into vpdpwssd, which a CPU without VNNI cannot run.
#define DSINFER_INT8_TILE_KERNEL(NAME, ATTR, DOT, DECODE)                                                           \
  template <int MR, int PG>                                                                                    \
  ATTR void NAME(const Int8PackedWeight& w, int64_t p0, const int8_t* q, int64_t ldq, const float* xs,        \
                 int64_t lds, const int32_t* qc, int64_t block, float* y, int64_t ldy) {                       \
    constexpr int NV = PG * kNV;                                                                               \
    const VI table = Table(), mask = Mask0F();                                                                 \
    const int64_t panel_bytes = (w.cols / 8) * kInt8OctetBytes;                                                \
    const uint8_t* panel0 = w.panel(p0);                                                                       \
    VFl acc[MR][NV];                                                                                           \
    for (int m = 0; m < MR; ++m)                                                                               \
      for (int v = 0; v < NV; ++v) acc[m][v] = SetF(0.0f);                                                     \
    for (int64_t g = 0; g < w.groups; ++g) {                                                                   \
      PrefetchGroup(w, p0, PG, g + kPrefetchGroups);                                                           \
      VI dot[MR][NV];                                                                                          \
      for (int m = 0; m < MR; ++m) {                                                                           \
        const VI c = Set32(static_cast<uint32_t>(qc[m * w.groups + g]));                                       \
        for (int v = 0; v < NV; ++v) dot[m][v] = c;                                                            \
      }                                                                                                        \
      _Pragma("GCC unroll 4") for (int o = 0; o < 4; ++o) {                                                    \
        VI lo[NV], hi[NV];                                                                                     \
        for (int v = 0; v < NV; ++v) {                                                                         \
          const VI raw = LoadI(panel0 + (v / kNV) * panel_bytes + (g * 4 + o) * kInt8OctetBytes +              \
                               (v % kNV) * kL * 4);                                                            \
          DECODE(table, mask, raw, lo[v], hi[v]);                                                              \
        }                                                                                                      \
        for (int m = 0; m < MR; ++m) {                                                                         \
          uint32_t word_lo, word_hi;                                                                           \
          std::memcpy(&word_lo, q + m * ldq + g * kInt8Group + o * 8, 4);                                      \
          std::memcpy(&word_hi, q + m * ldq + g * kInt8Group + o * 8 + 4, 4);                                  \
          const VI a_lo = Set32(word_lo), a_hi = Set32(word_hi);                                               \
          for (int v = 0; v < NV; ++v) dot[m][v] = DOT(DOT(dot[m][v], lo[v], a_lo), hi[v], a_hi);              \
        }                                                                                                      \
      }                                                                                                        \
      for (int m = 0; m < MR; ++m) {                                                                           \
        const VFl x_scale = SetF(xs[m * lds + g * kInt8Group / block]);                                        \
        for (int v = 0; v < NV; ++v) {                                                                         \
          const VFl ws =                                                                                       \
              LoadHalfScale(w, ((p0 + v / kNV) * w.groups + g) * kInt8PanelRows + (v % kNV) * kL);             \
          acc[m][v] = MulAddF(Cvt(dot[m][v]), MulF(x_scale, ws), acc[m][v]);                                   \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
    for (int v = 0; v < NV; ++v) {                                                                             \
      const int64_t r0 = (p0 + v / kNV) * kInt8PanelRows + (v % kNV) * kL;                                     \
      const int64_t count = std::min<int64_t>(kL, w.rows - r0);                                                \
      for (int m = 0; m < MR; ++m) {                                                                           \
        if (count == kL) {                                                                                     \
          StoreF(y + m * ldy + r0, acc[m][v]);                                                                 \
        } else if (count > 0) {                                                                                \
          alignas(64) float part[kL];                                                                          \
          StoreF(part, acc[m][v]);                                                                             \
          std::memcpy(y + m * ldy + r0, part, count * sizeof(float));                                          \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
  }

DSINFER_INT8_PANEL_KERNEL(PanelMaddubs, , DotMaddubs)
DSINFER_INT8_PANEL_ROWS_KERNEL(PanelRowsMaddubs, , DotMaddubs)
DSINFER_INT8_TILE_KERNEL(TileMaddubs, , DotMaddubs, DecodeShuffle)

#if HWY_TARGET == HWY_AVX3
#define DSINFER_INT8_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#define DSINFER_INT8_VNNI_VBMI __attribute__((target(HWY_TARGET_STR ",avx512vnni,avx512vbmi")))
HWY_INLINE DSINFER_INT8_VNNI VI DotVnni(VI acc, VI a, VI b) { return _mm512_dpbusd_epi32(acc, a, b); }
// vpermb indexes the 64-byte table (the 16 values four times) with the low 6 bits of each byte, so
// neither nibble needs the mask: for the high nibble the 16-bit shift's incoming bits land in bits 4..7.
// The zero-masked form again (the false GCC 12 warning about _mm512_undefined_epi32).
HWY_INLINE DSINFER_INT8_VNNI_VBMI void DecodeVbmi(VI table, VI /*mask*/, VI raw, VI& lo, VI& hi) {
  constexpr __mmask64 kAll = ~__mmask64{0};
  lo = _mm512_maskz_permutexvar_epi8(kAll, raw, table);
  hi = _mm512_maskz_permutexvar_epi8(kAll, Srl4(raw), table);
}
DSINFER_INT8_PANEL_KERNEL(PanelVnni, DSINFER_INT8_VNNI, DotVnni)
DSINFER_INT8_PANEL_ROWS_KERNEL(PanelRowsVnni, DSINFER_INT8_VNNI, DotVnni)
DSINFER_INT8_TILE_KERNEL(TileVnni, DSINFER_INT8_VNNI, DotVnni, DecodeShuffle)
DSINFER_INT8_TILE_KERNEL(TileVnniVbmi, DSINFER_INT8_VNNI_VBMI, DotVnni, DecodeVbmi)
#undef DSINFER_INT8_VNNI
#undef DSINFER_INT8_VNNI_VBMI
#endif
#undef DSINFER_INT8_TILE_KERNEL
#undef DSINFER_INT8_PANEL_KERNEL
#undef DSINFER_INT8_PANEL_ROWS_KERNEL

enum class DotPath { kMaddubs, kVnni, kVnniVbmi };

struct TileArgs {
  const Int8PackedWeight* w;
  const int8_t* q;
  int64_t ldq;
  const float* xs;
  int64_t lds;
  const int32_t* qc;
  int64_t block;
  float* y;
  int64_t ldy;
};

// MR rows of x from row m against PG panels from p.
template <int MR, int PG>
HWY_INLINE void TileAt(DotPath path, const TileArgs& a, int64_t p, int64_t m) {
  const int8_t* q = a.q + m * a.ldq;
  const float* xs = a.xs + m * a.lds;
  const int32_t* qc = a.qc + m * a.w->groups;
  float* y = a.y + m * a.ldy;
#if HWY_TARGET == HWY_AVX3
  if (path == DotPath::kVnniVbmi) return TileVnniVbmi<MR, PG>(*a.w, p, q, a.ldq, xs, a.lds, qc, a.block, y, a.ldy);
  if (path == DotPath::kVnni) return TileVnni<MR, PG>(*a.w, p, q, a.ldq, xs, a.lds, qc, a.block, y, a.ldy);
#else
  (void)path;
#endif
  TileMaddubs<MR, PG>(*a.w, p, q, a.ldq, xs, a.lds, qc, a.block, y, a.ldy);
}

// Panels [p, p_end) for MR rows of x in tiles of TilePanels(MR) panels, the remainder one by one.
template <int MR>
void TileRange(DotPath path, const TileArgs& a, int64_t p, int64_t p_end) {
  constexpr int PG = TilePanels(MR);
  // The first tile's first groups: the loop prefetches the rest of the range ahead of itself.
  for (int64_t g = 0; g < kPrefetchGroups; ++g) PrefetchGroup(*a.w, p, PG, g);
  for (; p + PG <= p_end; p += PG) TileAt<MR, PG>(path, a, p, 0);
  for (; p < p_end; ++p) TileAt<MR, 1>(path, a, p, 0);
}

#else
// The oracle's loop on the packed layout.
void PanelScalar(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                 const int32_t* /*qc*/, int64_t M, int64_t block, float* acc) {
  const uint8_t* panel = w.panel(p);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t r = 0; r < kInt8PanelRows; ++r) {
      float sum = 0.0f;
      for (int64_t g = 0; g < w.groups; ++g) {
        int32_t dot = 0;
        for (int64_t kk = 0; kk < kInt8Group; ++kk) {
          const int64_t o = g * 4 + kk / 8, j = kk % 8;
          const uint8_t b = panel[o * kInt8OctetBytes + 4 * r + (j % 4)];
          const uint8_t code = j < 4 ? (b & 0xF) : (b >> 4);
          dot += static_cast<int32_t>(q[m * ldq + g * kInt8Group + kk]) * kInt8E2M1x2[code];
        }
        const int64_t at = (p * w.groups + g) * kInt8PanelRows + r;
        const float c = xs[m * lds + g * kInt8Group / block] * w.half_scale_at(at);
        sum = std::fma(static_cast<float>(dot), c, sum);
      }
      acc[m * kInt8PanelRows + r] = sum;
    }
  }
}
#endif

void Int8PackedForward(const Int8PackedWeight& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                       int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end) {
  // -12·Σq per row of x and group: the start of every int32 dot of that row and group.
  thread_local std::vector<int32_t> qc_buf;
  qc_buf.resize(M * w.groups);
  int32_t* qc = qc_buf.data();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t g = 0; g < w.groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * kInt8Group; k < (g + 1) * kInt8Group; ++k) sum += q[m * ldq + k];
      qc[m * w.groups + g] = -kInt8WeightOffset * sum;
    }
  }
#if defined(DSINFER_INT8_SIMD)
  DotPath path = DotPath::kMaddubs;
#if HWY_TARGET == HWY_AVX3
  if (int8_vnni_allowed()) path = int8_vbmi_allowed() ? DotPath::kVnniVbmi : DotPath::kVnni;
#endif
  const TileArgs a{&w, q, ldq, xs, lds, qc, block, y, ldy};
  static_assert(kTileMaxRows == 4);
  switch (M) {
    case 1: TileRange<1>(path, a, p_begin, p_end); return;
    case 2: TileRange<2>(path, a, p_begin, p_end); return;
    case 3: TileRange<3>(path, a, p_begin, p_end); return;
    case 4: TileRange<4>(path, a, p_begin, p_end); return;
    default: break;
  }
  thread_local std::vector<float> acc;
  acc.resize(M * kInt8PanelRows);
  const bool rows4 = M >= kPanelRowsMin;
  for (int64_t p = p_begin; p < p_end; ++p) {
#if HWY_TARGET == HWY_AVX3
    if (path != DotPath::kMaddubs) {
      if (rows4) {
        PanelRowsVnni(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
      } else {
        PanelVnni(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
      }
    } else if (rows4) {
      PanelRowsMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
    } else {
      PanelMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
    }
#else
    if (rows4) {
      PanelRowsMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
    } else {
      PanelMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
    }
#endif
    StoreRows(w, p, M, acc.data(), y, ldy);
  }
#else
  std::vector<float> acc(M * kInt8PanelRows);
  for (int64_t p = p_begin; p < p_end; ++p) {
    PanelScalar(w, p, q, ldq, xs, lds, qc, M, block, acc.data());
    StoreRows(w, p, M, acc.data(), y, ldy);
  }
#endif
}
#undef DSINFER_INT8_SIMD

// quantize_int8_blocks (linear_int8.h) with vectors: the block maximum and the finite check lane-wise,
// then the same product x · (127 / amax), round half to even (as std::nearbyint in the default rounding
// mode), clamp and narrowing per element, so every q and xs is bitwise the scalar formula's.
void QuantizeInt8Blocks(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t block, int8_t* q, int64_t ldq,
                        float* xs, int64_t lds) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::ScalableTag<float> df;
  const hn::Rebind<int32_t, decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t blocks = (K + block - 1) / block;
  const auto big = hn::Set(df, std::numeric_limits<float>::max());
  const auto lo = hn::Set(df, -127.0f), hi = hn::Set(df, 127.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * ldx;
    int8_t* qm = q + m * ldq;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * block, k1 = std::min(K, k0 + block);
      auto vmax = hn::Zero(df);
      bool finite = true;
      int64_t k = k0;
      for (; k + N <= k1; k += N) {
        const auto a = hn::Abs(hn::LoadU(df, xm + k));
        finite = finite && hn::AllTrue(df, hn::Le(a, big));  // false for inf and NaN
        vmax = hn::Max(vmax, a);
      }
      float amax = hn::GetLane(hn::MaxOfLanes(df, vmax));
      for (; k < k1; ++k) {
        finite = finite && std::isfinite(xm[k]);
        amax = std::max(amax, std::fabs(xm[k]));
      }
      if (!finite) {
        xs[m * lds + b] = std::numeric_limits<float>::quiet_NaN();
        std::fill(qm + k0, qm + k1, int8_t{0});
        continue;
      }
      xs[m * lds + b] = amax / 127.0f;
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      const auto vinv = hn::Set(df, inv);
      for (k = k0; k + N <= k1; k += N) {
        const auto r = hn::Min(hn::Max(hn::Round(hn::Mul(hn::LoadU(df, xm + k), vinv)), lo), hi);
        hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, r)), d8, qm + k);
      }
      for (; k < k1; ++k) qm[k] = static_cast<int8_t>(std::clamp(std::nearbyint(xm[k] * inv), -127.0f, 127.0f));
    }
  }
}


}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>

namespace dsinfer::kernels::detail {

namespace {
std::atomic<bool> g_vnni_allowed{true};
std::atomic<bool> g_vbmi_allowed{true};
}

bool int8_vnni_allowed() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu_has_vnni = __builtin_cpu_supports("avx512vnni");
  return cpu_has_vnni && g_vnni_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool int8_vbmi_allowed() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu_has_vbmi = __builtin_cpu_supports("avx512vbmi");
  return cpu_has_vbmi && g_vbmi_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void set_int8_vnni_allowed(bool allowed) { g_vnni_allowed.store(allowed, std::memory_order_relaxed); }
void set_int8_vbmi_allowed(bool allowed) { g_vbmi_allowed.store(allowed, std::memory_order_relaxed); }

HWY_EXPORT(Int8PackedForward);
HWY_EXPORT(QuantizeInt8Blocks);

void int8_quantize_blocks(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t block, int8_t* q, int64_t ldq,
                          float* xs, int64_t lds) {
  HWY_DYNAMIC_DISPATCH(QuantizeInt8Blocks)(x, M, ldx, K, block, q, ldq, xs, lds);
}

void int8_packed_forward(const Int8PackedWeight& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                         int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end) {
  HWY_DYNAMIC_DISPATCH(Int8PackedForward)(w, q, ldq, xs, lds, M, block, y, ldy, p_begin, p_end);
}

}  // namespace dsinfer::kernels::detail
#endif  // HWY_ONCE
