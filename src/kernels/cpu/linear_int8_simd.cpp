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
// layout, with std::fma.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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
}  // namespace dsinfer::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels::detail {
namespace HWY_NAMESPACE {

// Stores the 16 accumulated rows of panel p for M rows of x (rows >= w.rows are padding).
HWY_INLINE void StoreRows(const Int8PackedWeight& w, int64_t p, int64_t M, const float* acc, float* y, int64_t ldy) {
  const int64_t r0 = p * kInt8PanelRows;
  const int64_t count = std::min<int64_t>(kInt8PanelRows, w.rows - r0);
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
  return w.bf16_scales ? LoadBf16(w.half_scale_bf16.data() + at) : LoadF(w.half_scale.data() + at);
}
constexpr int kNV = static_cast<int>(kInt8PanelRows / kL);  // vectors per panel

// The panel kernel, written once for both dot instructions. It is a macro, not a template on the dot,
// because the VNNI instance must be compiled with avx512vnni and the maddubs instances must not be:
// with VNNI enabled the compiler may fuse pmaddwd + paddd into vpdpwssd, which a CPU without VNNI
// cannot run. Per group: decode the panel's 32 columns (8 quads of kNV vectors) once, then for each
// row of x the int32 dots and the fp32 tail of linear_int8.h.
#define DSINFER_INT8_PANEL_KERNEL(NAME, ATTR, DOT)                                                            \
  ATTR void NAME(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs,         \
                 int64_t lds, const int32_t* qc, int64_t M, int64_t block, float* acc) {                       \
    const VI table = Table(), mask = Mask0F();                                                                 \
    const uint8_t* panel = w.panel(p);                                                                         \
    for (int64_t i = 0; i < M * kInt8PanelRows; ++i) acc[i] = 0.0f;                                            \
    for (int64_t g = 0; g < w.groups; ++g) {                                                                   \
      VI wv[8][kNV];                                                                                           \
      for (int o = 0; o < 4; ++o) {                                                                            \
        for (int v = 0; v < kNV; ++v) {                                                                        \
          const VI raw = LoadI(panel + (g * 4 + o) * kInt8OctetBytes + v * kL * 4);                            \
          wv[2 * o][v] = Shuffle(table, AndI(raw, mask));                                                      \
          wv[2 * o + 1][v] = Shuffle(table, AndI(Srl4(raw), mask));                                            \
        }                                                                                                      \
      }                                                                                                        \
      const int64_t at = (p * w.groups + g) * kInt8PanelRows;                                                  \
      VFl ws[kNV];                                                                                             \
      for (int v = 0; v < kNV; ++v) ws[v] = LoadHalfScale(w, at + v * kL);                                     \
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

// Rows of x up to which the tile kernel below runs (decode: the rows routed to one expert).
constexpr int64_t kTileMaxRows = 4;

// Panels per tile for MR rows of x: the MR · PG · kNV int32 dots and as many fp32 sums stay in
// registers (32 on AVX-512, 16 on AVX2) beside one decoded vector per panel vector.
constexpr int TilePanels(int MR) { return kNV == 1 ? (MR <= 2 ? 4 : 2) : (MR == 1 ? 2 : 1); }

// The tile kernel for 1..kTileMaxRows rows of x: PG panels at once, so the 8 dependent dots of one
// group overlap with the other PG · kNV - 1 vectors' chains, and the fp32 sums stay in registers over
// all groups instead of a store and reload per group. Each lane runs the panel kernel's operations in
// its order (int32 dot from -12·Σq, then per group one product and one fused multiply-add,
// groups ascending), so the results are bitwise the same.
#define DSINFER_INT8_TILE_KERNEL(NAME, ATTR, DOT)                                                             \
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
          lo[v] = Shuffle(table, AndI(raw, mask));                                                             \
          hi[v] = Shuffle(table, AndI(Srl4(raw), mask));                                                       \
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
DSINFER_INT8_TILE_KERNEL(TileMaddubs, , DotMaddubs)

#if HWY_TARGET == HWY_AVX3
HWY_INLINE __attribute__((target(HWY_TARGET_STR ",avx512vnni"))) VI DotVnni(VI acc, VI a, VI b) {
  return _mm512_dpbusd_epi32(acc, a, b);
}
DSINFER_INT8_PANEL_KERNEL(PanelVnni, __attribute__((target(HWY_TARGET_STR ",avx512vnni"))), DotVnni)
DSINFER_INT8_TILE_KERNEL(TileVnni, __attribute__((target(HWY_TARGET_STR ",avx512vnni"))), DotVnni)
#endif
#undef DSINFER_INT8_PANEL_KERNEL
#undef DSINFER_INT8_TILE_KERNEL

// Panels [p, p_end) for MR rows of x in tiles of TilePanels(MR) panels, the remainder one by one.
template <int MR>
void TileRange(const Int8PackedWeight& w, int64_t p, int64_t p_end, const int8_t* q, int64_t ldq, const float* xs,
               int64_t lds, const int32_t* qc, int64_t block, float* y, int64_t ldy, [[maybe_unused]] bool vnni) {
  constexpr int PG = TilePanels(MR);
#if HWY_TARGET == HWY_AVX3
  if (vnni) {
    for (; p + PG <= p_end; p += PG) TileVnni<MR, PG>(w, p, q, ldq, xs, lds, qc, block, y, ldy);
    for (; p < p_end; ++p) TileVnni<MR, 1>(w, p, q, ldq, xs, lds, qc, block, y, ldy);
    return;
  }
#endif
  for (; p + PG <= p_end; p += PG) TileMaddubs<MR, PG>(w, p, q, ldq, xs, lds, qc, block, y, ldy);
  for (; p < p_end; ++p) TileMaddubs<MR, 1>(w, p, q, ldq, xs, lds, qc, block, y, ldy);
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
                       int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end, float* acc) {
  // -12·Σq per row of x and group: the start of every int32 dot of that row and group.
  std::vector<int32_t> qc_buf(M * w.groups);
  int32_t* qc = qc_buf.data();
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t g = 0; g < w.groups; ++g) {
      int32_t sum = 0;
      for (int64_t k = g * kInt8Group; k < (g + 1) * kInt8Group; ++k) sum += q[m * ldq + k];
      qc[m * w.groups + g] = -kInt8WeightOffset * sum;
    }
  }
#if defined(DSINFER_INT8_SIMD)
#if HWY_TARGET == HWY_AVX3
  const bool vnni = int8_vnni_allowed();
#else
  const bool vnni = false;
#endif
  switch (M) {
    case 1: TileRange<1>(w, p_begin, p_end, q, ldq, xs, lds, qc, block, y, ldy, vnni); return;
    case 2: TileRange<2>(w, p_begin, p_end, q, ldq, xs, lds, qc, block, y, ldy, vnni); return;
    case 3: TileRange<3>(w, p_begin, p_end, q, ldq, xs, lds, qc, block, y, ldy, vnni); return;
    case 4: TileRange<4>(w, p_begin, p_end, q, ldq, xs, lds, qc, block, y, ldy, vnni); return;
    default: static_assert(kTileMaxRows == 4); break;
  }
#endif
  for (int64_t p = p_begin; p < p_end; ++p) {
#if defined(DSINFER_INT8_SIMD)
#if HWY_TARGET == HWY_AVX3
    if (vnni) {
      PanelVnni(w, p, q, ldq, xs, lds, qc, M, block, acc);
    } else {
      PanelMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc);
    }
#else
    PanelMaddubs(w, p, q, ldq, xs, lds, qc, M, block, acc);
#endif
#else
    PanelScalar(w, p, q, ldq, xs, lds, qc, M, block, acc);
#endif
    StoreRows(w, p, M, acc, y, ldy);
  }
}
#undef DSINFER_INT8_SIMD

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>

namespace dsinfer::kernels::detail {

namespace {
std::atomic<bool> g_vnni_allowed{true};
}

bool int8_vnni_allowed() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu_has_vnni = __builtin_cpu_supports("avx512vnni");
  return cpu_has_vnni && g_vnni_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

void set_int8_vnni_allowed(bool allowed) { g_vnni_allowed.store(allowed, std::memory_order_relaxed); }

HWY_EXPORT(Int8PackedForward);

void int8_packed_forward(const Int8PackedWeight& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                         int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end,
                         float* acc) {
  HWY_DYNAMIC_DISPATCH(Int8PackedForward)(w, q, ldq, xs, lds, M, block, y, ldy, p_begin, p_end, acc);
}

}  // namespace dsinfer::kernels::detail
#endif  // HWY_ONCE
