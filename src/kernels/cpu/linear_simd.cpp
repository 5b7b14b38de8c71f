// Per-target kernels of Linear (compiled once per Highway target, chosen at run time).
//
// Summation order (the batch-invariance contract): for every output y[m][n],
//   acc = 0; for k = 0, 1, ..., K-1: acc = MulAdd(x[m][k], W[n][k], acc); y[m][n] = acc
// where W[n][k] is the exact fp32 value of the weight (scales applied by exact power-of-two products).
// One vector lane is one output row n, so the order is the same for every M, every row of x, every
// thread count and every vector width; on targets with FMA (AVX2, AVX-512) every step is one fused
// multiply-add, so results are also identical across those targets. Targets without FMA (SSE4, SSSE3,
// EMU128) round the product separately; still one fixed order.
//
// Two schedules share that order:
//  - stream (M <= kStreamMaxRows): each k-pair of a group of panels is decoded in registers and used
//    for all M rows at once; the weights are read exactly once, at memory speed where the decode keeps up.
//  - gemm (larger M): a group of panels is decoded once into a cache-resident f32 buffer ([k][16] per
//    panel), then a register-tiled micro-kernel (MR rows of x × 16·PG rows of W) runs over all rows of x.
#include <algorithm>
#include <cstdint>
#include <cstring>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "core/dtypes.h"
#include "kernels/cpu/linear_packed.h"

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

// Gemm micro-kernel: MR rows of x × PG panels.
constexpr int kGemmPanels = kNV == 1 ? 2 : 1;
constexpr int kGemmRows = kRegisters == 32 ? 12 : (kNV == 2 ? 6 : 3);
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

HWY_INLINE void DecodeFP8(const uint8_t* panel, int64_t kp, float scale, VF* e, VF* o) {
  const uint16_t* q = reinterpret_cast<const uint16_t*>(panel) + kp * 16;
  const float s = scale * (1.0f / 256.0f);
  float re[16], ro[16];
  for (int r = 0; r < 16; ++r) {
    re[r] = core::fp8_e4m3_to_float(static_cast<uint8_t>(q[r] & 0xFF)) * s;
    ro[r] = core::fp8_e4m3_to_float(static_cast<uint8_t>(q[r] >> 8)) * s;
  }
  LoadRows(re, e);
  LoadRows(ro, o);
}

HWY_INLINE void DecodeFP4(const uint8_t* panel, int64_t kp, const float* scales, VF* e, VF* o) {
  float re[16], ro[16];
  for (int r = 0; r < 16; ++r) {
    re[r] = core::fp4_e2m1_to_float(panel[kp * 16 + r] & 0xF) * scales[r];
    ro[r] = core::fp4_e2m1_to_float(panel[kp * 16 + r] >> 4) * scales[r];
  }
  LoadRows(re, e);
  LoadRows(ro, o);
}

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

// FP8: u16 lane r = code(row r, even k) | code(row r, odd k) << 8. The fp16 with sign at bit 15 and the
// code's 7 magnitude bits at bits 13..7 is exactly fp8 · 2^-8; `scale` carries the block scale · 2^8.
template <size_t N = kN>
HWY_INLINE void DecodeFP8(const uint8_t* panel, int64_t kp, float scale, VF* e, VF* o) {
  const DF df;
  const VF s = hn::Set(df, scale);
  const uint16_t* q = reinterpret_cast<const uint16_t*>(panel) + kp * 16;
  if constexpr (N <= 8) {
    const hn::Repartition<int16_t, DF> di;  // 2N lanes = 2N rows
    const hn::Half<decltype(di)> dih;
    const hn::Rebind<hwy::float16_t, decltype(dih)> dh;
    constexpr int kChunks = static_cast<int>(16 / (2 * kN));
    for (int c = 0; c < kChunks; ++c) {
      const auto v = hn::BitCast(di, hn::LoadU(hn::RebindToUnsigned<decltype(di)>(), q + c * 2 * kN));
      const auto ev = hn::And(hn::ShiftRight<1>(hn::ShiftLeft<8>(v)), hn::Set(di, static_cast<int16_t>(0xBFFF)));
      const auto ov = hn::And(hn::ShiftRight<1>(v), hn::Set(di, static_cast<int16_t>(0xBF80)));
      e[2 * c] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(dih, ev))), s);
      e[2 * c + 1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(dih, ev))), s);
      o[2 * c] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(dih, ov))), s);
      o[2 * c + 1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(dih, ov))), s);
    }
  } else {
    const hn::Rebind<int16_t, DF> di;  // 16 lanes
    const hn::Rebind<hwy::float16_t, DF> dh;
    const auto v = hn::BitCast(di, hn::LoadU(hn::RebindToUnsigned<decltype(di)>(), q));
    const auto ev = hn::And(hn::ShiftRight<1>(hn::ShiftLeft<8>(v)), hn::Set(di, static_cast<int16_t>(0xBFFF)));
    const auto ov = hn::And(hn::ShiftRight<1>(v), hn::Set(di, static_cast<int16_t>(0xBF80)));
    e[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, ev)), s);
    o[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, ov)), s);
  }
}

// FP4: byte r = nibble(row r, even k) | nibble(row r, odd k) << 4. A 16-entry byte table maps a nibble
// to the high byte of the fp16 of its E2M1 value (the low byte is zero for every E2M1 value).
// `scales` are the 16 rows' f32 scales of the current 32-column group.
template <size_t N = kN>
HWY_INLINE void DecodeFP4(const uint8_t* panel, int64_t kp, const float* scales, VF* e, VF* o) {
  const DF df;
  {
  const hn::Full128<uint8_t> d8;
  const hn::Full128<uint16_t> d16;
  HWY_ALIGN static constexpr uint8_t kTable[16] = {0x00, 0x38, 0x3C, 0x3E, 0x40, 0x42, 0x44, 0x46,
                                                   0x80, 0xB8, 0xBC, 0xBE, 0xC0, 0xC2, 0xC4, 0xC6};
  const auto table = hn::Load(d8, kTable);
  const auto nib = hn::Set(d8, 0x0F);
  const auto b = hn::LoadU(d8, panel + kp * 16);
  const auto lo = hn::And(b, nib);
  const auto hi = hn::And(hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(d16, b))), nib);
  const auto tl = hn::TableLookupBytes(table, lo);
  const auto th = hn::TableLookupBytes(table, hi);
  const auto zero = hn::Zero(d8);
  // u16 lanes with the table byte on top: rows 0..7 and rows 8..15.
  const auto el = hn::ZipLower(d16, zero, tl);
  const auto eh = hn::ZipUpper(d16, zero, tl);
  const auto ol = hn::ZipLower(d16, zero, th);
  const auto oh = hn::ZipUpper(d16, zero, th);
  if constexpr (N == 8) {
    const hn::CappedTag<hwy::float16_t, N> dh;
    e[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, el)), hn::Load(df, scales));
    e[1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, eh)), hn::Load(df, scales + 8));
    o[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, ol)), hn::Load(df, scales));
    o[1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, oh)), hn::Load(df, scales + 8));
  } else if constexpr (N == 4) {
    const hn::CappedTag<uint16_t, N> d16h;
    const hn::CappedTag<hwy::float16_t, N> dh;
    const decltype(el) parts_e[2] = {el, eh};
    const decltype(el) parts_o[2] = {ol, oh};
    for (int h = 0; h < 2; ++h) {
      e[2 * h] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(d16h, parts_e[h]))),
                         hn::Load(df, scales + 8 * h));
      e[2 * h + 1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(d16h, parts_e[h]))),
                             hn::Load(df, scales + 8 * h + 4));
      o[2 * h] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(d16h, parts_o[h]))),
                         hn::Load(df, scales + 8 * h));
      o[2 * h + 1] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(d16h, parts_o[h]))),
                             hn::Load(df, scales + 8 * h + 4));
    }
  } else {
    const hn::CappedTag<uint16_t, N> d16w;
    const hn::CappedTag<hwy::float16_t, N> dh;
    e[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::Combine(d16w, eh, el))), hn::Load(df, scales));
    o[0] = hn::Mul(hn::PromoteTo(df, hn::BitCast(dh, hn::Combine(d16w, oh, ol))), hn::Load(df, scales));
  }
  }
}

// E8M0 codes of 16 rows -> f32 scales (code 0 is 2^-127, an fp32 subnormal).
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

// ---- formats: scale blocks along k and the decode of one k-pair of one panel ----

// Scales of up to 8 panels for one block of k-pairs.
struct alignas(64) ScaleBlock {
  float fp4[8][16];
  float fp8[8];
};

struct FmtF32 {
  static constexpr int64_t kBlockPairs = INT64_MAX / 4;
  static void load(const PackedWeight&, int64_t, int, int64_t, ScaleBlock&) {}
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock&, int, int64_t p, int64_t kp, VF* e, VF* o) {
    DecodeF32(w.panel(p), kp, e, o);
  }
};

struct FmtBF16 {
  static constexpr int64_t kBlockPairs = INT64_MAX / 4;
  static void load(const PackedWeight&, int64_t, int, int64_t, ScaleBlock&) {}
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock&, int, int64_t p, int64_t kp, VF* e, VF* o) {
    DecodeBF16(w.panel(p), kp, e, o);
  }
};

struct FmtFP8 {
  static constexpr int64_t kBlockPairs = kFp8Block / 2;
  static void load(const PackedWeight& w, int64_t p0, int g_count, int64_t block, ScaleBlock& sb) {
    const float* s = reinterpret_cast<const float*>(w.scales.get());
    for (int g = 0; g < g_count; ++g) {
      const int64_t row_block = (p0 + g) * kPanelRows / kFp8Block;
      sb.fp8[g] = s[row_block * w.fp8_scale_cols + block];
    }
  }
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock& sb, int g, int64_t p, int64_t kp, VF* e,
                                VF* o) {
    DecodeFP8(w.panel(p), kp, sb.fp8[g], e, o);
  }
};

struct FmtFP4 {
  static constexpr int64_t kBlockPairs = kFp4Group / 2;
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
  static HWY_INLINE void decode(const PackedWeight& w, const ScaleBlock& sb, int g, int64_t p, int64_t kp, VF* e,
                                VF* o) {
    DecodeFP4(w.panel(p), kp, sb.fp4[g], e, o);
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
  const int64_t blocks = (w.k_pairs + Fmt::kBlockPairs - 1) / Fmt::kBlockPairs;
  ScaleBlock sb;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    Fmt::load(w, p0, G, blk, sb);
    const int64_t kb = blk * Fmt::kBlockPairs;
    const int64_t ke = std::min(full_pairs, kb + Fmt::kBlockPairs);
    for (int64_t kp = kb; kp < ke; ++kp) {
      for (int g = 0; g < G; ++g) {
        VF e[kNV], o[kNV];
        Fmt::decode(w, sb, g, p0 + g, kp, e, o);
        for (int m = 0; m < MR; ++m) {
          const VF xe = hn::Set(df, x[m * ldx + 2 * kp]);
          const VF xo = hn::Set(df, x[m * ldx + 2 * kp + 1]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xe, e[v], acc[m][g * kNV + v]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xo, o[v], acc[m][g * kNV + v]);
        }
      }
    }
    if ((K & 1) && full_pairs >= kb && full_pairs < kb + Fmt::kBlockPairs) {  // last, unpaired k
      for (int g = 0; g < G; ++g) {
        VF e[kNV], o[kNV];
        Fmt::decode(w, sb, g, p0 + g, full_pairs, e, o);
        for (int m = 0; m < MR; ++m) {
          const VF xe = hn::Set(df, x[m * ldx + K - 1]);
          for (int v = 0; v < kNV; ++v) acc[m][g * kNV + v] = hn::MulAdd(xe, e[v], acc[m][g * kNV + v]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int g = 0; g < G; ++g) StorePanel(&acc[m][g * kNV], p0 + g, y + m * ldy, row_lo, row_hi);
}

template <class Fmt, int MR>
void StreamRows(const PackedWeight& w, int64_t pb, int64_t pe, const float* x, int64_t ldx, float* y, int64_t ldy,
                int64_t row_lo, int64_t row_hi) {
  constexpr int G = StreamGroup<MR>();
  int64_t p = pb;
  for (; p + G <= pe; p += G) StreamPanels<Fmt, MR, G>(w, p, x, ldx, y, ldy, row_lo, row_hi);
  for (; p < pe; ++p) StreamPanels<Fmt, MR, 1>(w, p, x, ldx, y, ldy, row_lo, row_hi);
}

// ---- gemm schedule ----

// Decodes panel p into dst[k][16] for k < 2·k_pairs.
template <class Fmt>
void DecodePanel(const PackedWeight& w, int64_t p, float* dst) {
  const DF df;
  const int64_t blocks = (w.k_pairs + Fmt::kBlockPairs - 1) / Fmt::kBlockPairs;
  ScaleBlock sb;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    Fmt::load(w, p, 1, blk, sb);
    const int64_t kb = blk * Fmt::kBlockPairs;
    const int64_t ke = std::min(w.k_pairs, kb + Fmt::kBlockPairs);
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

// acc[m][j] over all k for MR rows of x and PG decoded panels (each [k][16], panel_stride floats apart).
template <int MR, int PG>
HWY_NOINLINE void MicroKernel(const float* panels, int64_t panel_stride, const float* x, int64_t ldx, int64_t K,
                              int64_t p0, float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
  const DF df;
  VF acc[MR][PG * kNV];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < PG * kNV; ++j) acc[m][j] = hn::Zero(df);
  for (int64_t k = 0; k < K; ++k) {
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

template <int PG, int MR = kGemmRows>
void MicroRows(const float* panels, int64_t panel_stride, const float* x, int64_t M, int64_t ldx, int64_t K, int64_t p0,
               float* y, int64_t ldy, int64_t row_lo, int64_t row_hi) {
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    MicroKernel<MR, PG>(panels, panel_stride, x + m * ldx, ldx, K, p0, y + m * ldy, ldy, row_lo, row_hi);
  if constexpr (MR > 1) {
    if (m < M) MicroRows<PG, MR - 1>(panels, panel_stride, x + m * ldx, M - m, ldx, K, p0, y + m * ldy, ldy, row_lo, row_hi);
  }
}

template <class Fmt>
void GemmRows(const PackedWeight& w, int64_t pb, int64_t pe, const float* x, int64_t M, int64_t ldx, float* y,
              int64_t ldy, int64_t row_lo, int64_t row_hi) {
  const int64_t panel_floats = w.k_pairs * 32;
  const int64_t group = std::max<int64_t>(
      kGemmPanels, kGemmBufferBytes / (panel_floats * 4) / kGemmPanels * kGemmPanels);
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffer;
  thread_local int64_t buffer_floats = 0;
  if (buffer_floats < group * panel_floats) {
    buffer = hwy::AllocateAligned<float>(group * panel_floats);
    buffer_floats = group * panel_floats;
  }
  float* buf = buffer.get();
  for (int64_t p = pb; p < pe; p += group) {
    const int64_t n = std::min(group, pe - p);
    for (int64_t g = 0; g < n; ++g) DecodePanel<Fmt>(w, p + g, buf + g * panel_floats);
    int64_t g = 0;
    for (; g + kGemmPanels <= n; g += kGemmPanels)
      MicroRows<kGemmPanels>(buf + g * panel_floats, panel_floats, x, M, ldx, w.cols, p + g, y, ldy, row_lo, row_hi);
    for (; g < n; ++g) MicroRows<1>(buf + g * panel_floats, panel_floats, x, M, ldx, w.cols, p + g, y, ldy, row_lo, row_hi);
  }
}

// ---- entry ----

template <class Fmt>
void ForwardFmt(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_lo,
                int64_t row_hi) {
  const int64_t pb = row_lo / kPanelRows;
  const int64_t pe = (row_hi + kPanelRows - 1) / kPanelRows;
  if (M > kStreamMaxRows) {
    GemmRows<Fmt>(w, pb, pe, x, M, ldx, y, ldy, row_lo, row_hi);
    return;
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
    case WeightFormat::kFP8: ForwardFmt<FmtFP8>(w, x, M, ldx, y, ldy, row_lo, row_hi); break;
    case WeightFormat::kFP4: ForwardFmt<FmtFP4>(w, x, M, ldx, y, ldy, row_lo, row_hi); break;
  }
}

int64_t StreamMaxRows() { return kStreamMaxRows; }

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels::detail {

HWY_EXPORT(PackedForward);
HWY_EXPORT(StreamMaxRows);

void packed_forward(const PackedWeight& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                    int64_t row_lo, int64_t row_hi) {
  HWY_DYNAMIC_DISPATCH(PackedForward)(w, x, M, ldx, y, ldy, row_lo, row_hi);
}

int64_t packed_stream_max_rows() { return HWY_DYNAMIC_DISPATCH(StreamMaxRows)(); }

}  // namespace dsinfer::kernels::detail
#endif  // HWY_ONCE
