#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/sink_attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/cpu/sink_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_bf16dot_scalar.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The attended rows: fp32, or packed (bf16 dims, then fp32 ones). Each vector of dims lies in one part,
// and widening bf16 to fp32 is exact, so every kernel below computes the same as on fp32 rows.
struct F32Rows {
  using Ptr = const float*;
  const float* const* rows;
  Ptr at(int64_t j) const { return rows[j]; }
  template <class D>
  HWY_INLINE auto Load(D d, Ptr p, int64_t i) const {
    return hn::LoadU(d, p + i);
  }
  float Value(Ptr p, int64_t i) const { return p[i]; }
};

struct PackedRows {
  using Ptr = const uint8_t*;
  const uint8_t* const* rows;
  int64_t bf16_dims;
  Ptr at(int64_t j) const { return rows[j]; }
  template <class D>
  HWY_INLINE auto Load(D d, Ptr p, int64_t i) const {
    if (i < bf16_dims) {
      const hn::RebindToUnsigned<D> du;
      const hn::Rebind<uint16_t, D> d16;
      return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(p) + i))));
    }
    return hn::LoadU(d, reinterpret_cast<const float*>(p + 2 * bf16_dims) + (i - bf16_dims));
  }
  float Value(Ptr p, int64_t i) const { return packed_row_value(p, bf16_dims, i); }
};

// Every (head, row) logit is one vector accumulator over the dims in ascending order, reduced across
// lanes, plus a scalar tail: the blocked loops below (2 heads x 4 rows share their loads) compute
// exactly that, so a logit does not depend on which block it fell in.
template <int kHeads, int kRows, class R>
inline void Logits(const float* const* q, const R& rw, int64_t j0, int64_t dim, float scale, float* const* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  typename R::Ptr rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = rw.at(j0 + r);
  decltype(hn::Zero(d)) acc[kHeads][kRows];
  for (int h = 0; h < kHeads; ++h)
    for (int r = 0; r < kRows; ++r) acc[h][r] = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= dim; i += N) {
    decltype(hn::Zero(d)) k[kRows];
    for (int r = 0; r < kRows; ++r) k[r] = rw.Load(d, rows[r], i);
    for (int h = 0; h < kHeads; ++h) {
      const auto qv = hn::LoadU(d, q[h] + i);
      for (int r = 0; r < kRows; ++r) acc[h][r] = hn::MulAdd(qv, k[r], acc[h][r]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < kRows; ++r) {
      float sum = hn::GetLane(hn::SumOfLanes(d, acc[h][r]));
      for (int64_t t = i; t < dim; ++t) sum += q[h][t] * rw.Value(rows[r], t);
      out[h][r] = sum * scale;
    }
  }
}

// o_h[i .. i + kVecs·N) = Σ_j p[h][j] · row_j over all n rows, each element one chain of multiply-adds
// from zero with j ascending (the definition's order), held in registers for the whole chain: one pass
// over the rows per slice of dims, with loads of the rows shared by kHeads heads and no stores inside.
template <int kHeads, int kVecs, class R>
inline void AccumulateSlice(const float* const* p, const R& rw, int64_t n, int64_t i, float* const* o) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  decltype(hn::Zero(d)) acc[kHeads][kVecs];
  for (int h = 0; h < kHeads; ++h)
    for (int v = 0; v < kVecs; ++v) acc[h][v] = hn::Zero(d);
  for (int64_t j = 0; j < n; ++j) {
    const typename R::Ptr row = rw.at(j);
    decltype(hn::Zero(d)) k[kVecs];
    for (int v = 0; v < kVecs; ++v) k[v] = rw.Load(d, row, i + v * N);
    for (int h = 0; h < kHeads; ++h) {
      const auto pv = hn::Set(d, p[h][j]);
      for (int v = 0; v < kVecs; ++v) acc[h][v] = hn::MulAdd(pv, k[v], acc[h][v]);
    }
  }
  for (int h = 0; h < kHeads; ++h)
    for (int v = 0; v < kVecs; ++v) hn::StoreU(acc[h][v], d, o[h] + i + v * N);
}

template <int kHeads, class R>
void HeadBlock(const SinkAttention& a, const R& rw, int64_t h0, float* s) {
  const int64_t n = a.n, dim = a.dim;
  const float* q[kHeads];
  for (int h = 0; h < kHeads; ++h) q[h] = a.q + (h0 + h) * dim;
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    float* out[kHeads];
    for (int h = 0; h < kHeads; ++h) out[h] = s + (h0 + h) * n + j;
    Logits<kHeads, 4>(q, rw, j, dim, a.scale, out);
  }
  for (; j < n; ++j) {
    float* out[kHeads];
    for (int h = 0; h < kHeads; ++h) out[h] = s + (h0 + h) * n + j;
    Logits<kHeads, 1>(q, rw, j, dim, a.scale, out);
  }
}

template <int kHeads, class R>
void HeadBlockPV(const SinkAttention& a, const R& rw, int64_t h0, const float* s) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = a.n, dim = a.dim;
  float* o[kHeads];
  const float* p[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    o[h] = a.out + (h0 + h) * dim;
    p[h] = s + (h0 + h) * n;
  }
  int64_t i = 0;
  for (; i + 4 * N <= dim; i += 4 * N) AccumulateSlice<kHeads, 4>(p, rw, n, i, o);
  for (; i + N <= dim; i += N) AccumulateSlice<kHeads, 1>(p, rw, n, i, o);
  for (; i < dim; ++i) {
    for (int h = 0; h < kHeads; ++h) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; ++j) acc = std::fma(p[h][j], rw.Value(rw.at(j), i), acc);
      o[h][i] = acc;
    }
  }
}

// Float bits whose high half is the bf16 rounded to nearest even (finite, non-NaN values).
template <class DU, class VU>
HWY_INLINE VU RoundedToBf16High(DU du, VU u) {
  const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
  return hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), lsb));
}

// q's bf16 dims rounded to nearest even (core::float_to_bf16 for the finite values q holds).
void QToBf16(const SinkAttention& a, uint16_t* qb) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<uint16_t, decltype(d)> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), nb = a.packed_bf16;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* q = a.q + h * a.dim;
    uint16_t* out = qb + h * nb;
    int64_t i = 0;
    for (; i + N <= nb; i += N) {
      const auto r = hn::ShiftRight<16>(RoundedToBf16High(du, hn::BitCast(du, hn::LoadU(d, q + i))));
      hn::StoreU(hn::TruncateTo(d16, r), d16, out + i);
    }
    for (; i < nb; ++i) out[i] = core::float_to_bf16(q[i]);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
// The lanes' sum in sink_logit_bf16_model's tree order. The zero-masked shuffles: GCC 12 warns
// (falsely) about the _mm512_undefined_ps inside the unmasked ones.
__attribute__((target(HWY_TARGET_STR ",avx512bf16"))) inline float SumTree(__m512 v) {
  const __mmask16 all = 0xFFFF;
  const __m512 a = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(all, v, v, 0x4E));  // lane l + l+8
  const __m512 b = _mm512_add_ps(a, _mm512_maskz_shuffle_f32x4(all, a, a, 0xB1));  // + l+4
  const __m512 c = _mm512_add_ps(b, _mm512_maskz_permute_ps(all, b, 0x4E));        // + l+2
  return _mm512_cvtss_f32(_mm512_add_ps(c, _mm512_maskz_permute_ps(all, c, 0xB1)));  // + l+1
}

// kHeads x kRows logits of sink_logit_bf16_model, each row's loads shared by the heads.
template <int kHeads, int kRows>
__attribute__((target(HWY_TARGET_STR ",avx512bf16"))) void LogitsBf16Hw(const uint16_t* const* qb,
                                                                      const float* const* q,
                                                                      const uint8_t* const* rows, int64_t nb,
                                                                      int64_t dim, float scale, float* const* out) {
  __m512 acc[kHeads][kRows];
  for (int h = 0; h < kHeads; ++h)
    for (int r = 0; r < kRows; ++r) acc[h][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; i += 32) {
    __m512i k[kRows];
    for (int r = 0; r < kRows; ++r) k[r] = _mm512_loadu_si512(rows[r] + 2 * i);
    for (int h = 0; h < kHeads; ++h) {
      const __m512i qv = _mm512_loadu_si512(qb[h] + i);
      for (int r = 0; r < kRows; ++r) acc[h][r] = _mm512_dpbf16_ps(acc[h][r], (__m512bh)qv, (__m512bh)k[r]);
    }
  }
  int64_t i = nb;
  for (; i + 16 <= dim; i += 16) {
    __m512 k[kRows];
    for (int r = 0; r < kRows; ++r)
      k[r] = _mm512_loadu_ps(reinterpret_cast<const float*>(rows[r] + 2 * nb) + (i - nb));
    for (int h = 0; h < kHeads; ++h) {
      const __m512 qv = _mm512_loadu_ps(q[h] + i);
      for (int r = 0; r < kRows; ++r) acc[h][r] = _mm512_fmadd_ps(qv, k[r], acc[h][r]);
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int r = 0; r < kRows; ++r) {
      float sum = SumTree(acc[h][r]);
      for (int64_t t = i; t < dim; ++t) sum = std::fma(q[h][t], packed_row_value(rows[r], nb, t), sum);
      out[h][r] = sum * scale;
    }
  }
}

template <int kHeads>
void HeadBlockBf16(const SinkAttention& a, int64_t h0, float* s, const uint16_t* qb) {
  const int64_t n = a.n, dim = a.dim, nb = a.packed_bf16;
  const uint16_t* qh[kHeads];
  const float* q[kHeads];
  for (int h = 0; h < kHeads; ++h) {
    qh[h] = qb + (h0 + h) * nb;
    q[h] = a.q + (h0 + h) * dim;
  }
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    float* out[kHeads];
    for (int h = 0; h < kHeads; ++h) out[h] = s + (h0 + h) * n + j;
    LogitsBf16Hw<kHeads, 4>(qh, q, a.packed + j, nb, dim, a.scale, out);
  }
  for (; j < n; ++j) {
    float* out[kHeads];
    for (int h = 0; h < kHeads; ++h) out[h] = s + (h0 + h) * n + j;
    LogitsBf16Hw<kHeads, 1>(qh, q, a.packed + j, nb, dim, a.scale, out);
  }
}
#endif

// The bf16_logits logits [H][n] into s.
void LogitsBf16(const SinkAttention& a, float* s, uint16_t* qb) {
  QToBf16(a, qb);
  const int64_t n = a.n, nb = a.packed_bf16, H = a.heads;
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  if (bf16dot_hardware()) {
    int64_t h = 0;
    for (; h + 4 <= H; h += 4) HeadBlockBf16<4>(a, h, s, qb);
    for (; h < H; ++h) HeadBlockBf16<1>(a, h, s, qb);
    return;
  }
#endif
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < n; ++j)
      s[h * n + j] = sink_logit_bf16_model(qb + h * nb, a.q + h * a.dim, a.packed[j], nb, a.dim) * a.scale;
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr bool kWideHeads = true;
#else
constexpr bool kWideHeads = false;
#endif

template <class R>
void Attend(const SinkAttention& a, const R& rw) {
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n = a.n, dim = a.dim, H = a.heads;
  float* s = a.scratch;            // [H][n] logits, then exp(l − M)
  float* den = a.scratch + H * n;  // [H]
  int64_t h = 0;
  if (a.bf16_logits) {
    LogitsBf16(a, s, reinterpret_cast<uint16_t*>(a.scratch + H * (n + 1)));
    h = H;
  }
  // With 32 vector registers (AVX-512) 4 heads share each pass over the rows (16 accumulators), else 2:
  // the rows (n · dim floats, beyond L1) are read once per pass, so half the passes halve that traffic.
  if constexpr (kWideHeads) {
    for (; h + 4 <= H; h += 4) HeadBlock<4>(a, rw, h, s);
  }
  for (; h + 2 <= H; h += 2) HeadBlock<2>(a, rw, h, s);
  for (; h < H; ++h) HeadBlock<1>(a, rw, h, s);
  // Flooring the exponent keeps Highway's Exp inside its valid range; exp(-87) is ~0 next to exp(0).
  const auto exp_floor = hn::Set(d, -87.0f);
  for (int64_t hh = 0; hh < H; ++hh) {
    float* sh = s + hh * n;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) m = std::max(m, sh[j]);
    const auto vm = hn::Set(d, m);
    auto acc = hn::Zero(d);
    int64_t j = 0;
    for (; j + N <= n; j += N) {
      auto e = hn::Exp(d, hn::Max(hn::Sub(hn::LoadU(d, sh + j), vm), exp_floor));
      if (a.bf16_probs) {  // round to nearest even at bit 16 (values finite, non-negative)
        auto u = hn::BitCast(du, e);
        u = hn::And(RoundedToBf16High(du, u), hn::Set(du, 0xFFFF0000u));
        e = hn::BitCast(d, u);
      }
      hn::StoreU(e, d, sh + j);
      acc = hn::Add(acc, e);
    }
    float sum = hn::GetLane(hn::SumOfLanes(d, acc));
    for (; j < n; ++j) {
      float e = std::exp(std::max(sh[j] - m, -87.0f));
      if (a.bf16_probs) e = core::round_to_bf16(e);
      sh[j] = e;
      sum += e;
    }
    den[hh] = sum + std::exp(a.sink[hh] - m);
  }
  h = 0;
  if constexpr (kWideHeads) {
    for (; h + 4 <= H; h += 4) HeadBlockPV<4>(a, rw, h, s);
  }
  for (; h + 2 <= H; h += 2) HeadBlockPV<2>(a, rw, h, s);
  for (; h < H; ++h) HeadBlockPV<1>(a, rw, h, s);
  for (int64_t hh = 0; hh < H; ++hh) {
    const auto vden = hn::Set(d, den[hh]);
    float* oh = a.out + hh * dim;
    int64_t i = 0;
    for (; i + N <= dim; i += N) hn::StoreU(hn::Div(hn::LoadU(d, oh + i), vden), d, oh + i);
    for (; i < dim; ++i) oh[i] /= den[hh];
  }
}

void SinkAttentionImpl(const SinkAttention& a) {
  if (a.packed != nullptr) {
    Attend(a, PackedRows{a.packed, a.packed_bf16});
  } else {
    Attend(a, F32Rows{a.rows});
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dsinfer::kernels {
HWY_EXPORT(SinkAttentionImpl);

namespace {
void check_rows(const SinkAttention& a) {
  DSINFER_CHECK((a.rows != nullptr) != (a.packed != nullptr), "sink attention: give rows or packed rows, one of them");
  DSINFER_CHECK(a.packed == nullptr || (a.packed_bf16 >= 0 && a.packed_bf16 <= a.dim &&
                                        a.packed_bf16 % kSinkPackedAlign == 0),
                "sink attention: packed rows' bf16 dims (", a.packed_bf16, ") must be a multiple of ",
                kSinkPackedAlign, " within the ", a.dim, " dims");
  DSINFER_CHECK(!a.bf16_logits || (a.packed != nullptr && a.packed_bf16 % kSinkBf16LogitsAlign == 0),
                "sink attention: bf16 logits need packed rows with a multiple of 32 bf16 dims, not ", a.packed_bf16);
}

float row_value(const SinkAttention& a, int64_t j, int64_t i) {
  return a.rows != nullptr ? a.rows[j][i] : packed_row_value(a.packed[j], a.packed_bf16, i);
}
}  // namespace

float sink_logit_bf16_model(const uint16_t* qb, const float* q, const uint8_t* row, int64_t bf16_dims, int64_t dim) {
  float lane[16] = {};
  for (int64_t i = 0; i < bf16_dims; i += 32) {
    for (int l = 0; l < 16; ++l) {
      for (int64_t e : {i + 2 * l + 1, i + 2 * l}) {
        uint16_t k;
        std::memcpy(&k, row + 2 * e, 2);
        lane[l] = detail::ftz(lane[l] + detail::bf16_daz(qb[e]) * detail::bf16_daz(k));
      }
    }
  }
  int64_t i = bf16_dims;
  for (; i + 16 <= dim; i += 16)
    for (int l = 0; l < 16; ++l) lane[l] = std::fma(q[i + l], packed_row_value(row, bf16_dims, i + l), lane[l]);
  for (int step = 8; step >= 1; step /= 2)
    for (int l = 0; l < step; ++l) lane[l] += lane[l + step];
  float sum = lane[0];
  for (int64_t t = i; t < dim; ++t) sum = std::fma(q[t], packed_row_value(row, bf16_dims, t), sum);
  return sum;
}

void sink_attention(const SinkAttention& a) {
  check_rows(a);
  if (a.n <= 0) {
    std::fill(a.out, a.out + a.heads * a.dim, 0.0f);
    return;
  }
  HWY_DYNAMIC_DISPATCH(SinkAttentionImpl)(a);
}

void sink_attention_scalar(const SinkAttention& a) {
  check_rows(a);
  const int64_t n = a.n, dim = a.dim;
  for (int64_t h = 0; h < a.heads; ++h) {
    const float* qh = a.q + h * dim;
    float* oh = a.out + h * dim;
    std::fill(oh, oh + dim, 0.0f);
    if (n <= 0) continue;
    float* l = a.scratch;
    float m = -std::numeric_limits<float>::infinity();
    std::vector<uint16_t> qb(a.bf16_logits ? a.packed_bf16 : 0);
    for (size_t i = 0; i < qb.size(); ++i) qb[i] = core::float_to_bf16(qh[i]);
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      if (a.bf16_logits) {
        acc = sink_logit_bf16_model(qb.data(), qh, a.packed[j], a.packed_bf16, dim);
      } else {
        for (int64_t i = 0; i < dim; ++i) acc += qh[i] * row_value(a, j, i);
      }
      l[j] = acc * a.scale;
      m = std::max(m, l[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      float e = std::exp(l[j] - m);
      if (a.bf16_probs) e = core::round_to_bf16(e);
      sum += e;
      for (int64_t i = 0; i < dim; ++i) oh[i] += e * row_value(a, j, i);
    }
    const float den = sum + std::exp(a.sink[h] - m);
    for (int64_t i = 0; i < dim; ++i) oh[i] /= den;
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
