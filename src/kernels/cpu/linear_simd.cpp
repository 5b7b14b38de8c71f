// Per-target kernels of Linear (compiled once per Highway target, chosen at run time).
//
// Summation order (the batch-invariance contract of linear.h): one vector lane is one output row n,
// and every output is an FMA chain over k in ascending order (FP4: chains over each 32-column group,
// then an FMA chain over the groups). Nothing in the order depends on M, on the other rows of x, on the
// thread count or on the vector width.
//
// Two schedules share that order:
//  - stream (M <= kStreamMaxRows): each k-pair of a group of panels is decoded in registers and used
//    for all M rows at once; the weights are read exactly once, at memory speed where the decode keeps up.
//    Decoding is a few integer shifts and masks per 8 weights (linear_packed.h); FP8 moves its block
//    scale onto x when that is exact, so the decode needs no multiply.
//  - gemm (larger M): a group of panels is decoded once into a cache-resident f32 buffer ([k][16] per
//    panel), then a register-tiled micro-kernel (MR rows of x × 16·PG rows of W) runs over all rows of x
//    in balanced tiles, while software prefetches bring in the next group's packed weights (at 5..32
//    rows, batched decode, the memory reads would otherwise not overlap the multiply-adds).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "core/dtypes.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "kernels/cpu/linear_packed.h"

#if HWY_TARGET == HWY_SCALAR && HWY_COMPILER_GCC_ACTUAL && HWY_COMPILER_GCC_ACTUAL < 1300
// GCC 12's SLP vectorizer turns the HWY_SCALAR stream kernels' loads of x into vector loads that reach
// one row of x past the end (seen as a rare SIGSEGV at the end of a heap mapping); the same GCC bug
// family is why Highway disables EMU128 below GCC 12.3. This target exists only as a fallback.
#pragma GCC push_options
#pragma GCC optimize("no-tree-vectorize")
#define DSINFER_LINEAR_NO_VECTORIZE 1
#endif
HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
constexpr size_t kN = hn::MaxLanes(DF());
static_assert(kN <= 16 && 16 % kN == 0, "Linear kernels need 1, 2, 4, 8 or 16 f32 lanes");
constexpr int kNV = static_cast<int>(16 / kN);  // vectors per 16-row panel

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3  // AVX-512 targets have 32 vector registers
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif

// Stream schedule: panels decoded together for MR rows of x, keeping MR·G·kNV accumulators live.
constexpr int kStreamMaxRows = 4;
template <int MR>
constexpr int StreamGroup() {
  constexpr int budget = kRegisters == 32 ? 16 : 8;  // accumulators
  int g = budget / (MR * kNV);
  if (g >= 8) return 8;
  if (g >= 4) return 4;
  if (g >= 2) return 2;
  return 1;
}

// Gemm micro-kernel: MR rows of x × PG panels. kGemmPanels is the FP4 kernel's PG; the others pick PG
// by the tile's rows (GemmTilePanels).
constexpr int kGemmPanels = kNV == 1 ? 2 : 1;
constexpr int kGemmRows = kRegisters == 32 ? 12 : (kNV == 2 ? 6 : 3);
// Accumulator vectors of one tile: the rest of the registers hold PG weight vectors and a broadcast of x.
constexpr int kGemmAccumulators = kRegisters == 32 ? 24 : 12;
constexpr int kGemmMaxPanels = 4;
// Panels of a tile of MR rows: as many as the accumulators allow, so a tile of few rows (M = 5..11, or
// the balanced halves of M = 16) still does PG·kNV multiply-adds per broadcast of x and MR per load of W.
constexpr int GemmTilePanels(int mr) {
  const int pg = kGemmAccumulators / (mr * kNV);
  return pg < 1 ? 1 : (pg > kGemmMaxPanels ? kGemmMaxPanels : pg);
}
// Decoded panels per gemm group: about 256 KiB of f32, so they stay in L2 while all rows of x pass.
constexpr int64_t kGemmBufferBytes = 256 * 1024;

// ---- decoders: one k-pair (k = 2kp, 2kp+1) of one 16-row panel into e[] (even k) and o[] (odd k) ----

HWY_INLINE void DecodeF32(const uint8_t* panel, int64_t kp, VF* e, VF* o) {
  const DF df;
  const float* p = reinterpret_cast<const float*>(panel) + kp * 32;
  for (int v = 0; v < kNV; ++v) {
    e[v] = hn::Load(df, p + v * kN);
    o[v] = hn::Load(df, p + 16 + v * kN);
  }
}

// Decoded rows in a buffer, for targets with fewer than 4 lanes (HWY_SCALAR), where speed is moot.
HWY_INLINE void LoadRows(const float* rows16, VF* out) {
  const DF df;
  for (int v = 0; v < kNV; ++v) out[v] = hn::LoadU(df, rows16 + v * kN);
}

#if HWY_TARGET == HWY_SCALAR
// One lane: decode with the scalar formulas of core/dtypes.h (this target exists for completeness).
HWY_INLINE void DecodeBF16(const uint8_t* panel, int64_t kp, VF* e, VF* o) {
  const uint32_t* q = reinterpret_cast<const uint32_t*>(panel) + kp * 16;
  float re[16], ro[16];
  for (int j = 0; j < 8; ++j) {
    re[j] = core::bits_float(q[j] << 16);
    re[j + 8] = core::bits_float(q[j] & 0xFFFF0000u);
    ro[j] = core::bits_float(q[8 + j] << 16);
    ro[j + 8] = core::bits_float(q[8 + j] & 0xFFFF0000u);
  }
  LoadRows(re, e);
  LoadRows(ro, o);
}

// `factor` multiplies fp8 · 2^-120 (see linear_packed.h); `pre` is 2^120 for two-step scales, else 1.
template <int kMode>
HWY_INLINE void DecodeFP8(const uint8_t* panel, int64_t kp, float factor, float pre, VF* e, VF* o) {
  if (kMode == 2) factor = pre = 1.0f;
  const uint8_t* q = panel + kp * 32;
  float re[16], ro[16];
  for (int j = 0; j < 8; ++j) {
    for (int h = 0; h < 2; ++h) {
      re[j + 8 * h] = core::fp8_e4m3_to_float(q[4 * j + h]) * std::ldexp(1.0f, -kFp8Bias) * pre * factor;
      ro[j + 8 * h] = core::fp8_e4m3_to_float(q[4 * j + 2 + h]) * std::ldexp(1.0f, -kFp8Bias) * pre * factor;
    }
  }
  LoadRows(re, e);
  LoadRows(ro, o);
}

// e2m1 · 2^-126 (see linear_packed.h); the group's scale is applied to the group's partial sum.
HWY_INLINE void DecodeFP4Quad(const uint8_t* panel, int64_t kq, VF (*out)[kNV]) {
  const uint8_t* q = panel + kq * 32;
  float rows[4][16];
  for (int r = 0; r < 16; ++r) {
    const uint8_t* u = q + 4 * (r % 8) + 2 * (r / 8);
    const unsigned bits = u[0] | (u[1] << 8);
    for (int i = 0; i < 4; ++i)
      rows[i][r] = core::fp4_e2m1_to_float((bits >> (4 * i)) & 0xF) * std::ldexp(1.0f, -kFp4Bias);
  }
  for (int i = 0; i < 4; ++i) LoadRows(rows[i], out[i]);
}

// E8M0 codes of 16 rows -> the f32 scales.
HWY_INLINE void DecodeE8M0x16(const uint8_t* codes, float* out) {
  for (int r = 0; r < 16; ++r) out[r] = core::e8m0_to_float(codes[r]);
}
#else
// 8 u32 lanes holding (row j, row j+8) bf16 pairs -> rows 0..15 as kNV vectors.
template <size_t N = kN>
HWY_INLINE void DecodeBF16Half(const uint32_t* q, VF* out) {
  const DF df;
  if constexpr (N == 8) {
    const hn::RebindToUnsigned<DF> du;
    const auto u = hn::Load(du, q);
    out[0] = hn::BitCast(df, hn::ShiftLeft<16>(u));
    out[1] = hn::BitCast(df, hn::And(u, hn::Set(du, 0xFFFF0000u)));
  } else if constexpr (N == 4) {
    const hn::RebindToUnsigned<DF> du;
    const auto u0 = hn::Load(du, q);
    const auto u1 = hn::Load(du, q + 4);
    const auto mask = hn::Set(du, 0xFFFF0000u);
    out[0] = hn::BitCast(df, hn::ShiftLeft<16>(u0));
    out[1] = hn::BitCast(df, hn::ShiftLeft<16>(u1));
    out[2] = hn::BitCast(df, hn::And(u0, mask));
    out[3] = hn::BitCast(df, hn::And(u1, mask));
  } else {
    const hn::Half<DF> dh;
    const hn::RebindToUnsigned<decltype(dh)> du;
    const auto u = hn::Load(du, q);
    const auto lo = hn::BitCast(dh, hn::ShiftLeft<16>(u));
    const auto hi = hn::BitCast(dh, hn::And(u, hn::Set(du, 0xFFFF0000u)));
    out[0] = hn::Combine(df, hi, lo);
  }
}

HWY_INLINE void DecodeBF16(const uint8_t* panel, int64_t kp, VF* e, VF* o) {
  const uint32_t* q = reinterpret_cast<const uint32_t*>(panel) + kp * 16;
  DecodeBF16Half(q, e);
  DecodeBF16Half(q + 8, o);
}

// FP8: u32 lane j of the layout holds codes b0 = (row j, k0), b1 = (row j+8, k0), b2 = (row j, k1),
// b3 = (row j+8, k1). With 16-bit shifts each u16 half yields two codes in "top half of an f32" form
// (sign at bit 15, magnitude at bits 10..4, i.e. fp8 · 2^-120); a shift or a mask then makes the f32.
template <class DU>
HWY_INLINE void Fp8Lanes(DU du, hn::Vec<DU> v, hn::Vec<DU>* e_lo, hn::Vec<DU>* e_hi, hn::Vec<DU>* o_lo,
                         hn::Vec<DU>* o_hi) {
  const hn::Repartition<int16_t, DU> d16;
  const auto w = hn::BitCast(d16, v);
  const auto mask = hn::Set(d16, static_cast<int16_t>(0x87F0));
  const auto lo = hn::BitCast(du, hn::And(hn::ShiftRight<4>(hn::ShiftLeft<8>(w)), mask));  // b0, b2
  const auto hi = hn::BitCast(du, hn::And(hn::ShiftRight<4>(w), mask));                   // b1, b3
  const auto top = hn::Set(du, 0xFFFF0000u);
  *e_lo = hn::ShiftLeft<16>(lo);
  *o_lo = hn::And(lo, top);
  *e_hi = hn::ShiftLeft<16>(hi);
  *o_hi = hn::And(hi, top);
}

// kMode: 0 multiplies the bits by `factor`, 1 by `pre` and then `factor` (two-step scales), 2 leaves the
// bits (fp8 · 2^-120) for a caller that scales x instead.
template <int kMode, size_t N = kN>
HWY_INLINE void DecodeFP8(const uint8_t* panel, int64_t kp, float factor, float pre, VF* e, VF* o) {
  const DF df;
  const VF f = hn::Set(df, factor);
  const VF p = hn::Set(df, pre);
  const uint32_t* q = reinterpret_cast<const uint32_t*>(panel) + kp * 8;
  if constexpr (N == 8) {
    const hn::RebindToUnsigned<DF> du;
    hn::Vec<decltype(du)> el, eh, ol, oh;
    Fp8Lanes(du, hn::Load(du, q), &el, &eh, &ol, &oh);
    e[0] = hn::BitCast(df, el);
    e[1] = hn::BitCast(df, eh);
    o[0] = hn::BitCast(df, ol);
    o[1] = hn::BitCast(df, oh);
  } else if constexpr (N == 4) {
    const hn::RebindToUnsigned<DF> du;
    hn::Vec<decltype(du)> el0, eh0, ol0, oh0, el1, eh1, ol1, oh1;
    Fp8Lanes(du, hn::Load(du, q), &el0, &eh0, &ol0, &oh0);
    Fp8Lanes(du, hn::Load(du, q + 4), &el1, &eh1, &ol1, &oh1);
    e[0] = hn::BitCast(df, el0);
    e[1] = hn::BitCast(df, el1);
    e[2] = hn::BitCast(df, eh0);
    e[3] = hn::BitCast(df, eh1);
    o[0] = hn::BitCast(df, ol0);
    o[1] = hn::BitCast(df, ol1);
    o[2] = hn::BitCast(df, oh0);
    o[3] = hn::BitCast(df, oh1);
  } else {
    const hn::Half<DF> dh;
    const hn::RebindToUnsigned<decltype(dh)> du;
    hn::Vec<decltype(du)> el, eh, ol, oh;
    Fp8Lanes(du, hn::Load(du, q), &el, &eh, &ol, &oh);
    e[0] = hn::Combine(df, hn::BitCast(dh, eh), hn::BitCast(dh, el));
    o[0] = hn::Combine(df, hn::BitCast(dh, oh), hn::BitCast(dh, ol));
  }
  if constexpr (kMode == 2) return;
  for (int v = 0; v < kNV; ++v) {
    if constexpr (kMode == 1) {
      e[v] = hn::Mul(e[v], p);
      o[v] = hn::Mul(o[v], p);
    }
    e[v] = hn::Mul(e[v], f);
    o[v] = hn::Mul(o[v], f);
  }
}

// FP4: u32 lane j of a k-quad holds u16(row j) | u16(row j+8) << 16, u16(row r) = nibbles of k0..k3 from
// the low bits up. 16-bit shifts put each nibble in "top half of an f32" form (sign at bit 15,
// magnitude at bits 8..6, i.e. e2m1 · 2^-126); a shift or a mask then makes the f32s of both rows.
template <class DU>
HWY_INLINE void Fp4Quad(DU du, hn::Vec<DU> v, hn::Vec<DU>* lo, hn::Vec<DU>* hi) {
  const hn::Repartition<int16_t, DU> d16;
  const auto w = hn::BitCast(d16, v);
  const auto mask = hn::Set(d16, static_cast<int16_t>(0x81C0));
  const auto top = hn::Set(du, 0xFFFF0000u);
  const hn::Vec<decltype(d16)> n[4] = {
      hn::And(hn::ShiftRight<6>(hn::ShiftLeft<12>(w)), mask), hn::And(hn::ShiftRight<6>(hn::ShiftLeft<8>(w)), mask),
      hn::And(hn::ShiftRight<6>(hn::ShiftLeft<4>(w)), mask), hn::And(hn::ShiftRight<6>(w), mask)};
  for (int i = 0; i < 4; ++i) {
    const auto u = hn::BitCast(du, n[i]);
    lo[i] = hn::ShiftLeft<16>(u);
    hi[i] = hn::And(u, top);
  }
}

// The four k of quad kq (k = 4kq .. 4kq+3) of one panel: out[i][v].
template <size_t N = kN>
HWY_INLINE void DecodeFP4Quad(const uint8_t* panel, int64_t kq, VF (*out)[kNV]) {
  const DF df;
  const uint32_t* q = reinterpret_cast<const uint32_t*>(panel) + kq * 8;
  if constexpr (N == 8) {
    const hn::RebindToUnsigned<DF> du;
    hn::Vec<decltype(du)> lo[4], hi[4];
    Fp4Quad(du, hn::Load(du, q), lo, hi);
    for (int i = 0; i < 4; ++i) {
      out[i][0] = hn::BitCast(df, lo[i]);
      out[i][1] = hn::BitCast(df, hi[i]);
    }
  } else if constexpr (N == 4) {
    const hn::RebindToUnsigned<DF> du;
    hn::Vec<decltype(du)> lo0[4], hi0[4], lo1[4], hi1[4];
    Fp4Quad(du, hn::Load(du, q), lo0, hi0);
    Fp4Quad(du, hn::Load(du, q + 4), lo1, hi1);
    for (int i = 0; i < 4; ++i) {
      out[i][0] = hn::BitCast(df, lo0[i]);
      out[i][1] = hn::BitCast(df, lo1[i]);
      out[i][2] = hn::BitCast(df, hi0[i]);
      out[i][3] = hn::BitCast(df, hi1[i]);
    }
  } else {
    // 16 lanes: one table lookup per k instead of the shifts and masks (and the 256-bit halves to
    // combine) of Fp4Quad: at 1..4 rows of x the decode, not memory, bounds the FP4 product.
    // Lanes 0..7 hold the u32 lanes (row j in the low u16), lanes 8..15 the same shifted right by 16
    // (row j+8): nibble i of lane r is then the code of (row r, k = 4kq + i). The table holds exactly
    // the bits Fp4Quad makes: sign to bit 31, magnitude to bits 24..22 (e2m1 · 2^-126).
    const hn::RebindToUnsigned<DF> du;
    const hn::Half<decltype(du)> dh;
    alignas(64) static constexpr uint32_t kTable[16] = {
        0x00000000u, 0x00400000u, 0x00800000u, 0x00C00000u, 0x01000000u, 0x01400000u, 0x01800000u, 0x01C00000u,
        0x80000000u, 0x80400000u, 0x80800000u, 0x80C00000u, 0x81000000u, 0x81400000u, 0x81800000u, 0x81C00000u};
    const VF table = hn::BitCast(df, hn::Load(du, kTable));
    const auto v = hn::Load(dh, q);
    const auto lanes = hn::Combine(du, hn::ShiftRight<16>(v), v);
    const auto nibble = hn::Set(du, 0xFu);
    out[0][0] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(lanes, nibble)));
    out[1][0] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(hn::ShiftRight<4>(lanes), nibble)));
    out[2][0] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(hn::ShiftRight<8>(lanes), nibble)));
    out[3][0] = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(hn::ShiftRight<12>(lanes), nibble)));
  }
}

// E8M0 codes of 16 rows -> the f32 scales (code 0 is the fp32 subnormal 2^-127).
HWY_INLINE void DecodeE8M0x16(const uint8_t* codes, float* out) {
  const DF df;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  for (int v = 0; v < kNV; ++v) {
    const auto c = hn::PromoteTo(du, hn::LoadU(d8, codes + v * kN));
    const auto bits = hn::IfThenElse(hn::Eq(c, hn::Zero(du)), hn::Set(du, 0x00400000u), hn::ShiftLeft<23>(c));
    hn::Store(hn::BitCast(df, bits), df, out + v * kN);
  }
}
#endif  // HWY_TARGET == HWY_SCALAR

// One k-pair of a panel (half of a quad), for the f32 panel decode of the gemm schedule.
HWY_INLINE void DecodeFP4(const uint8_t* panel, int64_t kp, VF* e, VF* o) {
  VF quad[4][kNV];
  DecodeFP4Quad(panel, kp / 2, quad);
  const int first = static_cast<int>(kp % 2) * 2;
  for (int v = 0; v < kNV; ++v) {
    e[v] = quad[first][v];
    o[v] = quad[first + 1][v];
  }
}

// ---- formats: scale blocks along k and the decode of one k-pair of one panel ----

// Scales of up to 8 panels for one block of k-pairs.
struct alignas(64) ScaleBlock {
  float fp4[8][16];
  float fp8[8];
  float pre = 1.0f;  // 2^bias for two-step scales
};

struct FmtF32 {
  static int64_t block_pairs(const PackedWeight&) { return INT64_MAX / 4; }
  static constexpr bool kScalesX = false;
  static void load(const PackedWeight&, int64_t, int, int64_t, ScaleBlock&) {}
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock&, int, int64_t p, int64_t kp, VF* e, VF* o) {
    DecodeF32(w.panel(p), kp, e, o);
  }
};

struct FmtBF16 {
  static int64_t block_pairs(const PackedWeight&) { return INT64_MAX / 4; }
  static constexpr bool kScalesX = false;
  static void load(const PackedWeight&, int64_t, int, int64_t, ScaleBlock&) {}
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock&, int, int64_t p, int64_t kp, VF* e, VF* o) {
    DecodeBF16(w.panel(p), kp, e, o);
  }
};

// kMode as DecodeFP8. Mode 2 (x pre-scaled): the stream kernel multiplies x by the block's factor,
// which is exact when the factors are powers of two >= 1 and x·factor stays finite (checked per call),
// so the products, and hence the results, are bitwise those of mode 0.
template <int kMode>
struct FmtFP8 {
  static int64_t block_pairs(const PackedWeight& w) { return w.fp8_block / 2; }
  static constexpr bool kScalesX = kMode == 2;
  static void load(const PackedWeight& w, int64_t p0, int g_count, int64_t block, ScaleBlock& sb) {
    sb.pre = w.two_step_scale ? std::ldexp(1.0f, kFp8Bias) : 1.0f;
    const float* s = reinterpret_cast<const float*>(w.scales.get());
    for (int g = 0; g < g_count; ++g) {
      const int64_t row_block = (p0 + g) * kPanelRows / w.fp8_block;
      sb.fp8[g] = s[row_block * w.fp8_scale_cols + block];
    }
  }
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock& sb, int g, int64_t p, int64_t kp, VF* e,
                                VF* o) {
    DecodeFP8<kMode>(w.panel(p), kp, sb.fp8[g], sb.pre, e, o);
  }
};

// FP4 scales are per row and 32-column group, so they cannot move to x; they multiply each group's
// partial sum instead (the FP4 order, see linear.h).
struct FmtFP4 {
  static int64_t block_pairs(const PackedWeight&) { return kFp4Group / 2; }
  static constexpr bool kScalesX = false;
  static void load(const PackedWeight& w, int64_t p0, int g_count, int64_t block, ScaleBlock& sb) {
    const int64_t groups = w.cols / kFp4Group;
    for (int g = 0; g < g_count; ++g) {
      const int64_t at = ((p0 + g) * groups + block) * 16;
      if (w.fp4_scales_f32) {
        std::memcpy(sb.fp4[g], reinterpret_cast<const float*>(w.scales.get()) + at, sizeof(sb.fp4[g]));
      } else {
        DecodeE8M0x16(w.scales.get() + at, sb.fp4[g]);
      }
    }
  }
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock&, int, int64_t p, int64_t kp, VF* e, VF* o) {
    DecodeFP4(w.panel(p), kp, e, o);
  }
};

// ---- output ----

// Stores the 16 rows of panel p held in acc[0..kNV) into y_row (absolute row indices), keeping only
// rows in [row_lo, row_hi).
HWY_INLINE void StorePanel(const VF* acc, int64_t p, float* y_row, int64_t row_lo, int64_t row_hi) {
  const DF df;
  const int64_t r0 = p * kPanelRows;
  if (r0 >= row_lo && r0 + kPanelRows <= row_hi) {
    for (int v = 0; v < kNV; ++v) hn::StoreU(acc[v], df, y_row + r0 + v * kN);
    return;
  }
  HWY_ALIGN float tmp[kPanelRows];
  for (int v = 0; v < kNV; ++v) hn::Store(acc[v], df, tmp + v * kN);
  const int64_t b = std::max(r0, row_lo), e = std::min(r0 + kPanelRows, row_hi);
  for (int64_t r = b; r < e; ++r) y_row[r] = tmp[r - r0];
}

// ---- stream schedule ----

template <class Fmt, int MR, int G>
HWY_NOINLINE void StreamPanels(const PackedWeight& w, int64_t p0, const float* x, int64_t ldx, float* y, int64_t ldy,
                               int64_t row_lo, int64_t row_hi) {
  const DF df;
  VF acc[MR][G * kNV];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < G * kNV; ++j) acc[m][j] = hn::Zero(df);
  const int64_t K = w.cols;
  const int64_t full_pairs = K / 2;
  const int64_t block_pairs = Fmt::block_pairs(w);
  const int64_t blocks = (w.k_pairs + block_pairs - 1) / block_pairs;
  ScaleBlock sb;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    Fmt::load(w, p0, G, blk, sb);
    // With kScalesX the G panels share one factor (groups never cross a row block: StreamRows).
    const float xf = Fmt::kScalesX ? sb.fp8[0] : 1.0f;
    const int64_t kb = blk * block_pairs;
    const int64_t ke = std::min(full_pairs, kb + block_pairs);
    for (int64_t kp = kb; kp < ke; ++kp) {
      for (int g = 0; g < G; ++g) {
        VF e[kNV], o[kNV];
        Fmt::decode(w, sb, g, p0 + g, kp, e, o);
        for (int m = 0; m < MR; ++m) {
          const VF xe = hn::Set(df, Fmt::kScalesX ? x[m * ldx + 2 * kp] * xf : x[m * ldx + 2 * kp]);
          const VF xo = hn::Set(df, Fmt::kScalesX ? x[m * ldx + 2 * kp + 1] * xf : x[m * ldx + 2 * kp + 1]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xe, e[v], acc[m][g * kNV + v]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xo, o[v], acc[m][g * kNV + v]);
        }
      }
    }
    if ((K & 1) && full_pairs >= kb && full_pairs < kb + block_pairs) {  // last, unpaired k
      for (int g = 0; g < G; ++g) {
        VF e[kNV], o[kNV];
        Fmt::decode(w, sb, g, p0 + g, full_pairs, e, o);
        for (int m = 0; m < MR; ++m) {
          const VF xe = hn::Set(df, Fmt::kScalesX ? x[m * ldx + K - 1] * xf : x[m * ldx + K - 1]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xe, e[v], acc[m][g * kNV + v]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < G; ++g) StorePanel(&acc[m][g * kNV], p0 + g, y + m * ldy, row_lo, row_hi);
}

// Panels [p, pe) in groups of G that start at multiples of G (so a group never crosses an FP8 scale
// block of a multiple of G panels), the unaligned ends in smaller groups.
template <class Fmt, int MR, int G>
void StreamRange(const PackedWeight& w, int64_t p, int64_t pe, const float* x, int64_t ldx, float* y, int64_t ldy,
                 int64_t row_lo, int64_t row_hi) {
  if constexpr (G > 1) {
    const int64_t aligned = std::min(pe, (p + G - 1) / G * G);
    if (p < aligned) StreamRange<Fmt, MR, G / 2>(w, p, aligned, x, ldx, y, ldy, row_lo, row_hi);
    for (p = aligned; p + G <= pe; p += G) StreamPanels<Fmt, MR, G>(w, p, x, ldx, y, ldy, row_lo, row_hi);
    if (p < pe) StreamRange<Fmt, MR, G / 2>(w, p, pe, x, ldx, y, ldy, row_lo, row_hi);
  } else {
    for (; p < pe; ++p) StreamPanels<Fmt, MR, 1>(w, p, x, ldx, y, ldy, row_lo, row_hi);
  }
}

// With x scaled by the block's factor (kScalesX) the G panels of a group share that factor, so G must
// divide the panels of a row block (V4.1's 32-row blocks: 2 panels); the other formats load a factor
// per panel and keep the widest group.
template <class Fmt, int MR, int G = StreamGroup<MR>()>
void StreamRows(const PackedWeight& w, int64_t pb, int64_t pe, const float* x, int64_t ldx, float* y, int64_t ldy,
                int64_t row_lo, int64_t row_hi) {
  if constexpr (Fmt::kScalesX && G > 1) {
    if ((w.fp8_block / kPanelRows) % G != 0) {
      StreamRows<Fmt, MR, G / 2>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi);
      return;
    }
  }
  StreamRange<Fmt, MR, G>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi);
}

// Largest |x| over M rows of K, or infinity when some x is not finite (then the caller keeps the
// exact weight decode: the x-scaling shortcut is only taken for finite x).
float MaxAbs(const float* x, int64_t M, int64_t ldx, int64_t K) {
  const DF df;
  const VF big = hn::Set(df, 3.4028234663852886e38f);
  auto m = hn::Zero(df);
  auto bad = hn::Zero(df);  // lanes that saw inf or NaN: all bits set
  for (int64_t r = 0; r < M; ++r) {
    const float* row = x + r * ldx;
    int64_t k = 0;
    for (; k + static_cast<int64_t>(kN) <= K; k += kN) {
      const VF a = hn::Abs(hn::LoadU(df, row + k));
      const auto finite = hn::Le(a, big);  // false for inf and NaN
      m = hn::Max(m, hn::IfThenElseZero(finite, a));
      bad = hn::Or(bad, hn::IfThenZeroElse(finite, hn::BitCast(df, hn::Set(hn::RebindToSigned<DF>(), -1))));
    }
    for (; k < K; ++k) {
      const float a = std::fabs(row[k]);
      if (!(a <= 3.4028234663852886e38f)) return INFINITY;
      m = hn::Max(m, hn::Set(df, a));
    }
  }
  if (!hn::AllTrue(hn::RebindToSigned<DF>(), hn::Eq(hn::BitCast(hn::RebindToSigned<DF>(), bad),
                                                     hn::Zero(hn::RebindToSigned<DF>()))))
    return INFINITY;
  HWY_ALIGN float lanes[kN];
  hn::Store(m, df, lanes);
  float r = 0.0f;
  for (size_t i = 0; i < kN; ++i) r = std::max(r, lanes[i]);
  return r;
}

// ---- gemm schedule ----

// Decodes panel p into dst[k][16] for k < 2·k_pairs.
template <class Fmt>
void DecodePanel(const PackedWeight& w, int64_t p, float* dst) {
  const DF df;
  const int64_t block_pairs = Fmt::block_pairs(w);
  const int64_t blocks = (w.k_pairs + block_pairs - 1) / block_pairs;
  ScaleBlock sb;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    Fmt::load(w, p, 1, blk, sb);
    const int64_t kb = blk * block_pairs;
    const int64_t ke = std::min(w.k_pairs, kb + block_pairs);
    for (int64_t kp = kb; kp < ke; ++kp) {
      VF e[kNV], o[kNV];
      Fmt::decode(w, sb, 0, p, kp, e, o);
      float* d = dst + kp * 32;
      for (int v = 0; v < kNV; ++v) {
        hn::Store(e[v], df, d + v * kN);
        hn::Store(o[v], df, d + 16 + v * kN);
      }
    }
  }
}

// Software prefetches of the next group's packed weights, spread over the multiply-adds of this
// group: without them a gemm group first waits for memory while it decodes, then computes with the
// memory idle, and at 8..32 rows (batched decode) the two phases take about as long as each other.
struct Prefetcher {
  const uint8_t* next = nullptr;
  const uint8_t* end = nullptr;
  int lines = 1;  // cache lines per step
  HWY_INLINE void Step() {
    for (int i = 0; i < lines && next < end; ++i, next += 64) hwy::Prefetch(next);
  }
};

// acc[m][j] over all k for MR rows of x and PG decoded panels (each [k][16], panel_stride floats apart).
template <int MR, int PG>
HWY_NOINLINE void MicroKernel(const float* panels, int64_t panel_stride, const float* x, int64_t ldx, int64_t K,
                              int64_t p0, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi,
                              Prefetcher* pf = nullptr) {
  const DF df;
  VF acc[MR][PG * kNV];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < PG * kNV; ++j) acc[m][j] = hn::Zero(df);
  for (int64_t k = 0; k < K; ++k) {
    if (pf != nullptr) pf->Step();
    VF wv[PG * kNV];
    for (int g = 0; g < PG; ++g)
      for (int v = 0; v < kNV; ++v) wv[g * kNV + v] = hn::Load(df, panels + g * panel_stride + k * 16 + v * kN);
    for (int m = 0; m < MR; ++m) {
      const VF xb = hn::Set(df, x[m * ldx + k]);
      for (int j = 0; j < PG * kNV; ++j) acc[m][j] = hn::MulAdd(xb, wv[j], acc[m][j]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < PG; ++g) StorePanel(&acc[m][g * kNV], p0 + g, y + m * ldy, row_lo, row_hi);
}

// Rows [0, M) of x in tiles of MR or MR - 1 rows against n decoded panels, PG at a time (the panels
// of a last, smaller group one at a time). The tiles only reorder which outputs are computed
// when; every output keeps its FMA chain over k, so results do not depend on the tiling.
template <int MR, int PG>
void TileRows(const float* panels, int64_t panel_stride, int64_t n, const float* x, int64_t M, int64_t ldx, int64_t K,
              int64_t p0, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi, Prefetcher* pf) {
  // Tiles of MR rows first, then of MR - 1: tiles = ceil(M / MR) and M >= tiles·(MR - 1).
  const int64_t tiles = (M + MR - 1) / MR;
  const int64_t full = M - tiles * (MR - 1);
  auto run = [&](auto kernel_full, auto kernel_short, int64_t g, int64_t stride) {
    int64_t m = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      const float* pw = panels + g * stride;
      if (t < full) {
        kernel_full(pw, x + m * ldx, p0 + g, y + m * ldy);
        m += MR;
      } else {
        kernel_short(pw, x + m * ldx, p0 + g, y + m * ldy);
        m += MR - 1;
      }
    }
  };
  int64_t g = 0;
  for (; g + PG <= n; g += PG) {
    run([&](const float* pw, const float* xt, int64_t p, float* yt) {
          MicroKernel<MR, PG>(pw, panel_stride, xt, ldx, K, p, yt, ldy, row_lo, row_hi, pf);
        },
        [&](const float* pw, const float* xt, int64_t p, float* yt) {
          if constexpr (MR > 1) MicroKernel<MR - 1, PG>(pw, panel_stride, xt, ldx, K, p, yt, ldy, row_lo, row_hi, pf);
        },
        g, panel_stride);
  }
  for (; g < n; ++g) {
    run([&](const float* pw, const float* xt, int64_t p, float* yt) {
          MicroKernel<MR, 1>(pw, panel_stride, xt, ldx, K, p, yt, ldy, row_lo, row_hi, pf);
        },
        [&](const float* pw, const float* xt, int64_t p, float* yt) {
          if constexpr (MR > 1) MicroKernel<MR - 1, 1>(pw, panel_stride, xt, ldx, K, p, yt, ldy, row_lo, row_hi, pf);
        },
        g, panel_stride);
  }
}

// Balanced row tiles: ceil(M / kGemmRows) tiles of MR or MR - 1 rows (M = 16 on AVX-512: two tiles of 8
// rows × 3 panels rather than 12 rows × 2 panels and a 4-row remainder that is mostly loads).
inline int GemmTileRows(int64_t M) {
  const int64_t tiles = (M + kGemmRows - 1) / kGemmRows;
  return static_cast<int>((M + tiles - 1) / tiles);
}

template <int MR = kGemmRows>
void TileRowsFor(int mr, const float* panels, int64_t panel_stride, int64_t n, const float* x, int64_t M, int64_t ldx,
                 int64_t K, int64_t p0, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi, Prefetcher* pf) {
  if (mr == MR) {
    TileRows<MR, GemmTilePanels(MR)>(panels, panel_stride, n, x, M, ldx, K, p0, y, ldy, row_lo, row_hi, pf);
    return;
  }
  if constexpr (MR > 1) TileRowsFor<MR - 1>(mr, panels, panel_stride, n, x, M, ldx, K, p0, y, ldy, row_lo, row_hi, pf);
}

template <class Fmt>
void GemmRows(const PackedWeight& w, int64_t pb, int64_t pe, const float* x, int64_t M, int64_t ldx, float* y,
              int64_t ldy, int64_t row_lo, int64_t row_hi) {
  const int mr = GemmTileRows(M);
  const int64_t pg = GemmTilePanels(mr);
  const int64_t panel_floats = w.k_pairs * 32;
  // A whole number of tile panel groups (at least one, even when that is more than the budget).
  const int64_t group = std::max<int64_t>(pg, kGemmBufferBytes / (panel_floats * 4) / pg * pg);
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  thread_local int64_t buffer_floats = 0;
  if (buffer_floats < group * panel_floats) {
    buffer = hwy::AllocateAligned<float>(group * panel_floats);
    buffer_floats = group * panel_floats;
  }
  float* buf = buffer.get();
  // Micro-kernel k steps per group: tiles × panel groups × K. Enough lines per step to fetch the next
  // group's bytes before this group is done (panels are contiguous in the packed weight).
  const int64_t tiles = (M + mr - 1) / mr;
  const int64_t steps = tiles * ((group + pg - 1) / pg) * w.cols;
  const int64_t lines = (group * w.panel_bytes + 63) / 64;
  const int lines_per_step = static_cast<int>(std::clamp<int64_t>((lines + steps - 1) / steps, 1, 8));
  for (int64_t p = pb; p < pe; p += group) {
    const int64_t n = std::min(group, pe - p);
    for (int64_t g = 0; g < n; ++g) DecodePanel<Fmt>(w, p + g, buf + g * panel_floats);
    Prefetcher pf;
    if (p + n < pe) {
      pf.next = w.panel(p + n);
      pf.end = w.panel(std::min(pe, p + n + group));
      pf.lines = lines_per_step;
    }
    TileRowsFor(mr, buf, panel_floats, n, x, M, ldx, w.cols, p, y, ldy, row_lo, row_hi, &pf);
  }
}

// ---- FP4: grouped order ----
// For row m of x with largest finite |x| in [2^E, 2^(E+1)): xs = x · 2^(126-E) (exact: a power-of-two
// scale-up that stays below 2^127), so the products xs · (e2m1 · 2^-126) = x · e2m1 · 2^-E are normal.
// y[m][n] = 2^E · (fma chain over groups g of part_g · scale[n][g]), part_g = fma chain over the 32 k of g.

// E of a row (0 when it has no finite non-zero value): the largest finite |x| through its bits (finite
// values are those below the bits of infinity), four accumulators.
int RowExponent(const float* x, int64_t K) {
  const hn::RebindToSigned<DF> di;
  const auto abs_mask = hn::Set(di, 0x7FFFFFFF);
  const auto inf = hn::Set(di, 0x7F800000);
  auto m0 = hn::Zero(di), m1 = hn::Zero(di), m2 = hn::Zero(di), m3 = hn::Zero(di);
  auto step = [&](auto& m, const float* p) HWY_ATTR {
    const auto b = hn::And(hn::BitCast(di, hn::LoadU(DF(), p)), abs_mask);
    m = hn::Max(m, hn::IfThenElseZero(hn::Lt(b, inf), b));
  };
  int64_t k = 0;
  for (; k + 4 * static_cast<int64_t>(kN) <= K; k += 4 * kN) {
    step(m0, x + k);
    step(m1, x + k + kN);
    step(m2, x + k + 2 * kN);
    step(m3, x + k + 3 * kN);
  }
  for (; k + static_cast<int64_t>(kN) <= K; k += kN) step(m0, x + k);
  HWY_ALIGN int32_t lanes[kN];
  hn::Store(hn::Max(hn::Max(m0, m1), hn::Max(m2, m3)), di, lanes);
  int32_t r = 0;
  for (size_t i = 0; i < kN; ++i) r = std::max(r, lanes[i]);
  for (; k < K; ++k) {
    const int32_t b = static_cast<int32_t>(core::float_bits(x[k]) & 0x7FFFFFFFu);
    if (b < 0x7F800000) r = std::max(r, b);
  }
  if (r == 0) return 0;
  int e = 0;
  std::frexp(core::bits_float(static_cast<uint32_t>(r)), &e);
  return e - 1;
}

// xs = x · 2^(126-E) per row, and post[2m], post[2m+1]: the two powers of two whose product is 2^E.
void PrepareFP4Rows(const float* x, int64_t M, int64_t ldx, int64_t K, float* xs, float* post) {
  const DF df;
  for (int64_t m = 0; m < M; ++m) {
    const int E = RowExponent(x + m * ldx, K);
    post[2 * m] = std::ldexp(1.0f, E / 2);
    post[2 * m + 1] = std::ldexp(1.0f, E - E / 2);
    const float* src = x + m * ldx;
    float* dst = xs + m * K;
    // 126 - E can reach 275 (tiny rows): apply it in steps of at most 2^127.
    int c = 126 - E;
    bool first = true;
    do {
      const int step = std::clamp(c, -126, 127);
      const float f = std::ldexp(1.0f, step);
      const VF fv = hn::Set(df, f);
      const float* in = first ? src : dst;
      int64_t k = 0;
      for (; k + static_cast<int64_t>(kN) <= K; k += kN) hn::StoreU(hn::Mul(hn::LoadU(df, in + k), fv), df, dst + k);
      for (; k < K; ++k) dst[k] = in[k] * f;
      c -= step;
      first = false;
    } while (c != 0);
  }
}

// y = acc · 2^E in two power-of-two steps (neither factor subnormal).
HWY_INLINE VF ScaleByExponent(VF acc, const float* post) {
  const DF df;
  return hn::Mul(hn::Mul(acc, hn::Set(df, post[0])), hn::Set(df, post[1]));
}

template <int MR, int G>
HWY_NOINLINE void StreamPanelsFP4(const PackedWeight& w, int64_t p0, const float* xs, const float* post, float* y,
                                  int64_t ldy, int64_t row_lo, int64_t row_hi) {
  const DF df;
  const int64_t K = w.cols;
  HWY_ALIGN float acc[MR][G * 16];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < G * 16; ++j) acc[m][j] = 0.0f;
  ScaleBlock sb;
  const int64_t groups = K / kFp4Group;
  for (int64_t grp = 0; grp < groups; ++grp) {
    FmtFP4::load(w, p0, G, grp, sb);
    VF part[MR][G * kNV];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < G * kNV; ++j) part[m][j] = hn::Zero(df);
    for (int64_t kq = grp * 8; kq < grp * 8 + 8; ++kq) {
      for (int g = 0; g < G; ++g) {
        VF quad[4][kNV];
        DecodeFP4Quad(w.panel(p0 + g), kq, quad);
        for (int m = 0; m < MR; ++m) {
          for (int i = 0; i < 4; ++i) {
            const VF xb = hn::Set(df, xs[m * K + 4 * kq + i]);
            for (int v = 0; v < kNV; ++v) part[m][g * kNV + v] = hn::MulAdd(xb, quad[i][v], part[m][g * kNV + v]);
          }
        }
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int g = 0; g < G; ++g)
        for (int v = 0; v < kNV; ++v) {
          float* a = &acc[m][g * 16 + v * kN];
          hn::Store(hn::MulAdd(part[m][g * kNV + v], hn::Load(df, sb.fp4[g] + v * kN), hn::Load(df, a)), df, a);
        }
  }
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < G; ++g) {
      VF out[kNV];
      for (int v = 0; v < kNV; ++v) out[v] = ScaleByExponent(hn::Load(df, &acc[m][g * 16 + v * kN]), post + 2 * m);
      StorePanel(out, p0 + g, y + m * ldy, row_lo, row_hi);
    }
}

template <int MR, int G>
void StreamRangeFP4(const PackedWeight& w, int64_t p, int64_t pe, const float* xs, const float* post, float* y,
                    int64_t ldy, int64_t row_lo, int64_t row_hi) {
  if constexpr (G > 1) {
    for (; p + G <= pe; p += G) StreamPanelsFP4<MR, G>(w, p, xs, post, y, ldy, row_lo, row_hi);
    if (p < pe) StreamRangeFP4<MR, G / 2>(w, p, pe, xs, post, y, ldy, row_lo, row_hi);
  } else {
    for (; p < pe; ++p) StreamPanelsFP4<MR, 1>(w, p, xs, post, y, ldy, row_lo, row_hi);
  }
}

// MR rows × PG decoded panels ([k][16] raw bits each, scales [groups][16] each).
template <int MR, int PG>
HWY_NOINLINE void MicroKernelFP4(const float* panels, int64_t panel_stride, const float* scales, int64_t scale_stride,
                                 const float* xs, int64_t K, const float* post, int64_t p0, float* y, int64_t ldy,
                                 int64_t row_lo, int64_t row_hi, Prefetcher* pf) {
  const DF df;
  HWY_ALIGN float acc[MR][PG * 16];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < PG * 16; ++j) acc[m][j] = 0.0f;
  for (int64_t grp = 0; grp < K / kFp4Group; ++grp) {
    pf->Step();
    VF part[MR][PG * kNV];
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < PG * kNV; ++j) part[m][j] = hn::Zero(df);
    for (int64_t k = grp * kFp4Group; k < (grp + 1) * kFp4Group; ++k) {
      VF wv[PG * kNV];
      for (int g = 0; g < PG; ++g)
        for (int v = 0; v < kNV; ++v) wv[g * kNV + v] = hn::Load(df, panels + g * panel_stride + k * 16 + v * kN);
      for (int m = 0; m < MR; ++m) {
        const VF xb = hn::Set(df, xs[m * K + k]);
        for (int j = 0; j < PG * kNV; ++j) part[m][j] = hn::MulAdd(xb, wv[j], part[m][j]);
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int g = 0; g < PG; ++g)
        for (int v = 0; v < kNV; ++v) {
          float* a = &acc[m][g * 16 + v * kN];
          const VF s = hn::Load(df, scales + g * scale_stride + grp * 16 + v * kN);
          hn::Store(hn::MulAdd(part[m][g * kNV + v], s, hn::Load(df, a)), df, a);
        }
  }
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < PG; ++g) {
      VF out[kNV];
      for (int v = 0; v < kNV; ++v) out[v] = ScaleByExponent(hn::Load(df, &acc[m][g * 16 + v * kN]), post + 2 * m);
      StorePanel(out, p0 + g, y + m * ldy, row_lo, row_hi);
    }
}

template <int PG, int MR = kGemmRows>
void MicroRowsFP4(const float* panels, int64_t panel_stride, const float* scales, int64_t scale_stride, const float* xs,
                  int64_t M, int64_t K, const float* post, int64_t p0, float* y, int64_t ldy, int64_t row_lo,
                  int64_t row_hi, Prefetcher* pf) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    MicroKernelFP4<MR, PG>(panels, panel_stride, scales, scale_stride, xs + m * K, K, post + 2 * m, p0, y + m * ldy, ldy,
                           row_lo, row_hi, pf);
  if constexpr (MR > 1) {
    if (m < M)
      MicroRowsFP4<PG, MR - 1>(panels, panel_stride, scales, scale_stride, xs + m * K, M - m, K, post + 2 * m, p0,
                               y + m * ldy, ldy, row_lo, row_hi, pf);
  }
}

void GemmRowsFP4(const PackedWeight& w, int64_t pb, int64_t pe, const float* xs, const float* post, int64_t M,
                 float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
  const int64_t K = w.cols;
  const int64_t groups = K / kFp4Group;
  const int64_t panel_floats = w.k_pairs * 32;
  const int64_t scale_floats = groups * 16;
  const int64_t group = std::max<int64_t>(
      kGemmPanels, kGemmBufferBytes / ((panel_floats + scale_floats) * 4) / kGemmPanels * kGemmPanels);
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  thread_local int64_t buffer_floats = 0;
  const int64_t need = group * (panel_floats + scale_floats);
  if (buffer_floats < need) {
    buffer = hwy::AllocateAligned<float>(need);
    buffer_floats = need;
  }
  float* wbuf = buffer.get();
  float* sbuf = wbuf + group * panel_floats;
  ScaleBlock sb;
  // The next group's packed nibbles, prefetched over this group's multiply-adds (as GemmRows): one
  // step per 32-column group of each tile.
  const int64_t steps = ((M + kGemmRows - 1) / kGemmRows) * ((group + kGemmPanels - 1) / kGemmPanels) * groups;
  const int64_t lines = (group * w.panel_bytes + 63) / 64;
  const int lines_per_step = static_cast<int>(std::clamp<int64_t>((lines + steps - 1) / steps, 1, 8));
  for (int64_t p = pb; p < pe; p += group) {
    const int64_t n = std::min(group, pe - p);
    for (int64_t g = 0; g < n; ++g) {
      DecodePanel<FmtFP4>(w, p + g, wbuf + g * panel_floats);
      for (int64_t grp = 0; grp < groups; ++grp) {
        FmtFP4::load(w, p + g, 1, grp, sb);
        std::memcpy(sbuf + g * scale_floats + grp * 16, sb.fp4[0], 16 * sizeof(float));
      }
    }
    Prefetcher pf;
    if (p + n < pe) {
      pf.next = w.panel(p + n);
      pf.end = w.panel(std::min(pe, p + n + group));
      pf.lines = lines_per_step;
    }
    int64_t g = 0;
    for (; g + kGemmPanels <= n; g += kGemmPanels)
      MicroRowsFP4<kGemmPanels>(wbuf + g * panel_floats, panel_floats, sbuf + g * scale_floats, scale_floats, xs, M, K,
                                post, p + g, y, ldy, row_lo, row_hi, &pf);
    for (; g < n; ++g)
      MicroRowsFP4<1>(wbuf + g * panel_floats, panel_floats, sbuf + g * scale_floats, scale_floats, xs, M, K, post,
                      p + g, y, ldy, row_lo, row_hi, &pf);
  }
}

void ForwardFP4(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_lo,
                int64_t row_hi) {
  const int64_t K = w.cols;
  // Not thread_local: a task of a nested parallel region may run another product on this thread.
  std::unique_ptr<float[]> buf(new float[static_cast<size_t>(M * K + 2 * M)]);  // uninitialised
  float* post = buf.get() + M * K;
  PrepareFP4Rows(x, M, ldx, K, buf.get(), post);
  const float* xs = buf.get();
  const int64_t pb = row_lo / kPanelRows;
  const int64_t pe = (row_hi + kPanelRows - 1) / kPanelRows;
  if (M > kStreamMaxRows) {
    GemmRowsFP4(w, pb, pe, xs, post, M, y, ldy, row_lo, row_hi);
    return;
  }
  switch (M) {
    case 1: StreamRangeFP4<1, StreamGroup<1>()>(w, pb, pe, xs, post, y, ldy, row_lo, row_hi); break;
    case 2: StreamRangeFP4<2, StreamGroup<2>()>(w, pb, pe, xs, post, y, ldy, row_lo, row_hi); break;
    case 3: StreamRangeFP4<3, StreamGroup<3>()>(w, pb, pe, xs, post, y, ldy, row_lo, row_hi); break;
    case 4: StreamRangeFP4<4, StreamGroup<4>()>(w, pb, pe, xs, post, y, ldy, row_lo, row_hi); break;
    default: break;
  }
}

// ---- entry ----

template <class Fmt>
void ForwardFmt(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_lo,
                int64_t row_hi) {
  const int64_t pb = row_lo / kPanelRows;
  const int64_t pe = (row_hi + kPanelRows - 1) / kPanelRows;
  if constexpr (!Fmt::kScalesX) {  // the gemm schedule decodes exact weights
    if (M > kStreamMaxRows) {
      GemmRows<Fmt>(w, pb, pe, x, M, ldx, y, ldy, row_lo, row_hi);
      return;
    }
  }
  if constexpr (std::is_same_v<Fmt, FmtFP8<0>>) {
    // Scale x instead of every weight vector when that is exact (see FmtFP8).
    if (w.fp8_pow2_factors && MaxAbs(x, M, ldx, w.cols) * w.fp8_max_factor < 1.0e38f) {
      ForwardFmt<FmtFP8<2>>(w, x, M, ldx, y, ldy, row_lo, row_hi);
      return;
    }
  }
  switch (M) {
    case 1: StreamRows<Fmt, 1>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi); break;
    case 2: StreamRows<Fmt, 2>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi); break;
    case 3: StreamRows<Fmt, 3>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi); break;
    case 4: StreamRows<Fmt, 4>(w, pb, pe, x, ldx, y, ldy, row_lo, row_hi); break;
    default: break;
  }
}

void PackedForward(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                   int64_t row_lo, int64_t row_hi) {
  if (M <= 0 || row_lo >= row_hi) return;
  switch (w.format) {
    case WeightFormat::kF32: ForwardFmt<FmtF32>(w, x, M, ldx, y, ldy, row_lo, row_hi); break;
    case WeightFormat::kBF16: ForwardFmt<FmtBF16>(w, x, M, ldx, y, ldy, row_lo, row_hi); break;
    case WeightFormat::kFP8:
      if (w.two_step_scale) {
        ForwardFmt<FmtFP8<1>>(w, x, M, ldx, y, ldy, row_lo, row_hi);
      } else {
        ForwardFmt<FmtFP8<0>>(w, x, M, ldx, y, ldy, row_lo, row_hi);
      }
      break;
    case WeightFormat::kFP4: ForwardFP4(w, x, M, ldx, y, ldy, row_lo, row_hi); break;
  }
}

int64_t StreamMaxRows() { return kStreamMaxRows; }
int64_t StreamGroupRows() { return kPanelRows * StreamGroup<1>(); }

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();
#ifdef DSINFER_LINEAR_NO_VECTORIZE
#pragma GCC pop_options
#undef DSINFER_LINEAR_NO_VECTORIZE
#endif

#if HWY_ONCE
#if HWY_ARCH_X86
#include <xmmintrin.h>
#endif

namespace dsinfer::kernels::detail {

HWY_EXPORT(PackedForward);
HWY_EXPORT(StreamMaxRows);
HWY_EXPORT(StreamGroupRows);

void packed_forward(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                    int64_t row_lo, int64_t row_hi) {
#if HWY_ARCH_X86
  // FP8/FP4 decode through fp32 subnormals (linear_packed.h): "denormals are zero" would flush them.
  const unsigned csr = _mm_getcsr();
  constexpr unsigned kDaz = 0x40;
  if ((csr & kDaz) && (w.format == WeightFormat::kFP8 || w.format == WeightFormat::kFP4)) {
    _mm_setcsr(csr & ~kDaz);
    HWY_DYNAMIC_DISPATCH(PackedForward)(w, x, M, ldx, y, ldy, row_lo, row_hi);
    _mm_setcsr(csr);
    return;
  }
#endif
  HWY_DYNAMIC_DISPATCH(PackedForward)(w, x, M, ldx, y, ldy, row_lo, row_hi);
}

int64_t packed_stream_max_rows() { return HWY_DYNAMIC_DISPATCH(StreamMaxRows)(); }
int64_t packed_stream_group_rows() { return HWY_DYNAMIC_DISPATCH(StreamGroupRows)(); }

}  // namespace dsinfer::kernels::detail
#endif  // HWY_ONCE
