// Per-target kernels of Fp4Int8Linear (compiled once per Highway target, chosen at run time).
//
// The integer work has no Highway op in the Highway this project builds with (1.0 has neither
// SumOfMulQuadAccumulate nor an AVX-512 VNNI target by default), so the x86 targets use the
// instructions directly on the target's native vectors: one int32 lane per output row, four k per
// lane. Weights: a byte shuffle maps each nibble to 2·e2m1 (int8). Activations: four q + 128 bytes
// broadcast to every lane (unsigned operand). Dot: vpdpbusd where the CPU has AVX-512 VNNI, else
// pmaddubsw + pmaddwd (AVX-512 BW, AVX2; exact: |pair sum| <= 2·255·12 < 2^15). The group's int32 sum starts at the
// correction -128·Σw, so it is exactly Σ q·w2 (linear_int8.h), whatever the instruction. The fp32 tail
// (convert, one product, one fused multiply-add per group, groups ascending) is the oracle's, lane by
// lane. Targets without AVX2 (SSE4, EMU128, scalar: fallbacks only) run the oracle's loop on the packed
// layout, with std::fma.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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
HWY_INLINE VI Table() { return _mm512_load_si512(kInt8E2M1x2); }
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
#else  // AVX2
using VI = __m256i;
using VFl = __m256;
constexpr int kL = 8;
HWY_INLINE VI LoadI(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
HWY_INLINE VI Set32(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
HWY_INLINE VI Mask0F() { return _mm256_set1_epi8(0x0F); }
HWY_INLINE VI Table() { return _mm256_load_si256(reinterpret_cast<const __m256i*>(kInt8E2M1x2)); }
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
#endif
constexpr int kNV = static_cast<int>(kInt8PanelRows / kL);  // vectors per panel

// The panel kernel, written once for both dot instructions. It is a macro, not a template on the dot,
// because the VNNI instance must be compiled with avx512vnni and the maddubs instances must not be:
// with VNNI enabled the compiler may fuse pmaddwd + paddd into vpdpwssd, which a CPU without VNNI
// cannot run. Per group: decode the panel's 32 columns (8 quads of kNV vectors) once, then for each
// row of x the int32 dots and the fp32 tail of linear_int8.h.
#define DSINFER_INT8_PANEL_KERNEL(NAME, ATTR, DOT)                                                            \
  ATTR void NAME(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs,         \
                 int64_t lds, int64_t M, int64_t block, float* acc) {                                          \
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
      VI corr[kNV];                                                                                            \
      VFl ws[kNV];                                                                                             \
      for (int v = 0; v < kNV; ++v) {                                                                          \
        corr[v] = LoadI(w.corr.data() + at + v * kL);                                                          \
        ws[v] = LoadF(w.half_scale.data() + at + v * kL);                                                      \
      }                                                                                                        \
      for (int64_t m = 0; m < M; ++m) {                                                                        \
        const int8_t* qm = q + m * ldq + g * kInt8Group;                                                       \
        VI dot[kNV];                                                                                           \
        for (int v = 0; v < kNV; ++v) dot[v] = corr[v];                                                        \
        for (int i = 0; i < 8; ++i) {                                                                          \
          uint32_t word;                                                                                       \
          std::memcpy(&word, qm + (i / 2) * 8 + (i % 2) * 4, 4);                                               \
          const VI a = Set32(word ^ 0x80808080u); /* q + 128 as unsigned bytes */                              \
          for (int v = 0; v < kNV; ++v) dot[v] = DOT(dot[v], a, wv[i][v]);                                     \
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

DSINFER_INT8_PANEL_KERNEL(PanelMaddubs, , DotMaddubs)

#if HWY_TARGET == HWY_AVX3
HWY_INLINE __attribute__((target(HWY_TARGET_STR ",avx512vnni"))) VI DotVnni(VI acc, VI a, VI b) {
  return _mm512_dpbusd_epi32(acc, a, b);
}
DSINFER_INT8_PANEL_KERNEL(PanelVnni, __attribute__((target(HWY_TARGET_STR ",avx512vnni"))), DotVnni)
#endif
#undef DSINFER_INT8_PANEL_KERNEL

#else
// The oracle's loop on the packed layout.
void PanelScalar(const Int8PackedWeight& w, int64_t p, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                 int64_t M, int64_t block, float* acc) {
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
        const float c = xs[m * lds + g * kInt8Group / block] * w.half_scale[at];
        sum = std::fma(static_cast<float>(dot), c, sum);
      }
      acc[m * kInt8PanelRows + r] = sum;
    }
  }
}
#endif

void Int8PackedForward(const Int8PackedWeight& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds,
                       int64_t M, int64_t block, float* y, int64_t ldy, int64_t p_begin, int64_t p_end, float* acc) {
#if defined(DSINFER_INT8_SIMD) && HWY_TARGET == HWY_AVX3
  const bool vnni = int8_vnni_allowed();
#endif
  for (int64_t p = p_begin; p < p_end; ++p) {
#if defined(DSINFER_INT8_SIMD)
#if HWY_TARGET == HWY_AVX3
    if (vnni) {
      PanelVnni(w, p, q, ldq, xs, lds, M, block, acc);
    } else {
      PanelMaddubs(w, p, q, ldq, xs, lds, M, block, acc);
    }
#else
    PanelMaddubs(w, p, q, ldq, xs, lds, M, block, acc);
#endif
#else
    PanelScalar(w, p, q, ldq, xs, lds, M, block, acc);
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
