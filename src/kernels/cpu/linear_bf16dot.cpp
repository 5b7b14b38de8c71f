// Bf16DotLinear: packing (stream groups of 16-row panels; per k-pair 16 u32 lanes a panel, bf16(W[r][2kp]) |
// bf16(W[r][2kp+1]) << 16), the oracle, and the per-target kernel (vdpbf16ps where the CPU has AVX-512 BF16).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_bf16dot_scalar.h"
#include "kernels/cpu/linear_packed.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/linear_bf16dot.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#ifndef DSINFER_BF16DOT_ONCE
#define DSINFER_BF16DOT_ONCE
namespace dsinfer::kernels::detail {

struct Bf16DotPacked {
  int64_t rows = 0, cols = 0, panels = 0, pairs = 0;
  // On 2 MiB pages like the other packed weights: 4 KiB pages end every hardware prefetch stream at a
  // page edge.
  Bytes data;
  const uint32_t* lanes() const { return reinterpret_cast<const uint32_t*>(data.get()); }
  int64_t lane_count() const { return panels * pairs * 16; }
  // In stream groups (linear_packed.h). The u32 lanes from one of panel p's k-pairs to the next, and
  // the offset of its lanes for k-pair 0 (lane r at + r, k-pair kp at + kp * kp_stride(p)).
  int64_t kp_stride(int64_t p) const { return stream_group_width(p, panels) * 16; }
  int64_t panel_offset(int64_t p) const { return stream_group_offset(p, pairs * 64) / 4; }
};

bool bf16dot_hw_allowed();

}  // namespace dsinfer::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace dsinfer::kernels::detail {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
constexpr int64_t kPrefetchLanes = 256;  // u32 lanes: 1 KB

// NP adjacent panels of a stream group × MR rows of x: NP·MR independent accumulators hide the latency
// of the chained vdpbf16ps and each weight load serves MR rows. Every output is still its own chain
// over kp ascending. kp_stride: the group's u32 lanes per k-pair.
// PF = 0: each panel's stream is prefetched kPrefetchLanes ahead. PF = 1 or 2: the tile is one of
// several passes of x rows over the same panels (already in L2), so it prefetches PF lines per step
// of the next group's panels instead, the first pf_steps steps from pf: the next group's memory
// stream is spread over the compute of every pass, not crowded into the first.
template <int NP, int MR, int PF>
__attribute__((target(HWY_TARGET_STR ",avx512bf16"))) void TileHw(const uint32_t* panel0, int64_t kp_stride,
                                                                int64_t pairs, const uint32_t* xp0, int64_t x_stride,
                                                                float* out /* [MR][NP][16] */,
                                                                const char* pf = nullptr, int64_t pf_steps = 0) {
  __m512 acc[MR][NP];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < pairs; ++kp) {
    __m512i w[NP];
    if constexpr (PF > 0) {
      if (kp < pf_steps)
        for (int l = 0; l < PF; ++l) _mm_prefetch(pf + (kp * PF + l) * 64, _MM_HINT_T1);
    }
    for (int p = 0; p < NP; ++p) {
      const uint32_t* lane = panel0 + kp * kp_stride + p * 16;
      // Each line kPrefetchLanes ahead of its use. Into L2: that many lines ahead outnumber the L1 miss
      // buffers (one-row MEDIUM head, one thread: 14.4-15.6 ms with T0, 10.0-10.1 with T1).
      if constexpr (PF == 0) _mm_prefetch(reinterpret_cast<const char*>(lane + kPrefetchLanes), _MM_HINT_T1);
      w[p] = _mm512_loadu_si512(lane);
    }
    for (int r = 0; r < MR; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(xp0[r * x_stride + kp]));
      for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_dpbf16_ps(acc[r][p], (__m512bh)w[p], (__m512bh)a);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < NP; ++p) _mm512_storeu_ps(out + (r * NP + p) * 16, acc[r][p]);
}
#endif

// Stores rows of panel p from a [16] block of outputs.
HWY_INLINE void StorePanel(const Bf16DotPacked& w, int64_t p, const float* out16, float* y_row) {
  const int64_t r0 = p * 16, count = std::min<int64_t>(16, w.rows - r0);
  // A whole panel as one constant-size copy (inlined): a variable size is a call to memmove, which
  // was 1-3 % of a 16-row decode step's profile (the head stores 8,080 panels per row of x).
  if (count == 16) std::memcpy(y_row + r0, out16, 16 * sizeof(float));
  else std::memcpy(y_row + r0, out16, count * sizeof(float));
}

void Bf16DotForward(const Bf16DotPacked& w, const uint32_t* xpairs, int64_t M, float* y, int64_t ldy, int64_t p_begin,
                    int64_t p_end) {
#if HWY_ARCH_X86 && HWY_TARGET == HWY_AVX3
  if (bf16dot_hw_allowed()) {
    alignas(64) float out[4 * 4 * 16];
    // Passes of 4-row tiles over a group of panels (the first from memory, the others from L2). With
    // two or more, every pass prefetches its share of the next group (lines of pf_line ... + lines).
    const int64_t tiles = M / 4 + M % 4;
    const bool next = M >= 8;
    const int pf_per_step = tiles >= 4 ? 1 : 2;
    for (int64_t p = p_begin; p < p_end;) {
      // A whole stream group in one tile, else (a range that cuts a group, or the last, narrower one)
      // one panel at a time.
      const int np = p % kStreamGroupPanels == 0 && stream_group_width(p, w.panels) == 4 && p + 4 <= p_end ? 4 : 1;
      const int64_t next_lines = next ? std::min<int64_t>(4, p_end - p - np) * w.pairs : 0;  // 64 B each
      const char* pf = reinterpret_cast<const char*>(w.lanes() + (p + np < w.panels ? w.panel_offset(p + np) : 0));
      int64_t pf_line = 0;
      const uint32_t* panel = w.lanes() + w.panel_offset(p);
      const int64_t kp_stride = w.kp_stride(p);
      for (int64_t m = 0; m < M;) {
        const int mr = m + 4 <= M ? 4 : 1;
        const uint32_t* xp = xpairs + m * w.pairs;
        const int64_t steps = std::clamp<int64_t>((next_lines - pf_line + pf_per_step - 1) / pf_per_step, 0, w.pairs);
        const char* pfl = pf + pf_line * 64;
        auto tile = [&]<int PF>(std::integral_constant<int, PF>) {
          if (np == 4 && mr == 4) TileHw<4, 4, PF>(panel, kp_stride, w.pairs, xp, w.pairs, out, pfl, steps);
          else if (np == 4) TileHw<4, 1, PF>(panel, kp_stride, w.pairs, xp, w.pairs, out, pfl, steps);
          else if (mr == 4) TileHw<1, 4, PF>(panel, kp_stride, w.pairs, xp, w.pairs, out, pfl, steps);
          else TileHw<1, 1, PF>(panel, kp_stride, w.pairs, xp, w.pairs, out, pfl, steps);
        };
        if (!next) tile(std::integral_constant<int, 0>{});
        else if (pf_per_step == 1) tile(std::integral_constant<int, 1>{});
        else tile(std::integral_constant<int, 2>{});
        pf_line += steps * pf_per_step;
        for (int r = 0; r < mr; ++r)
          for (int q = 0; q < np; ++q) StorePanel(w, p + q, out + (r * np + q) * 16, y + (m + r) * ldy);
        m += mr;
      }
      p += np;
    }
    return;
  }
#endif
  float out[16];
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint32_t* panel = w.lanes() + w.panel_offset(p);
    const int64_t count = std::min<int64_t>(16, w.rows - p * 16), kp_stride = w.kp_stride(p);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t r = 0; r < count; ++r) out[r] = bf16dot_scalar(panel + r, kp_stride, xpairs + m * w.pairs, w.pairs);
      StorePanel(w, p, out, y + m * ldy);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dsinfer::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>

namespace dsinfer::kernels {

namespace detail {
namespace {
std::atomic<bool> g_hw_allowed{true};
}
bool bf16dot_hw_allowed() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool cpu = __builtin_cpu_supports("avx512bf16");
  return cpu && g_hw_allowed.load(std::memory_order_relaxed);
#else
  return false;
#endif
}
void set_bf16dot_hw_allowed(bool allowed) { g_hw_allowed.store(allowed, std::memory_order_relaxed); }
HWY_EXPORT(Bf16DotForward);
}  // namespace detail

struct Bf16DotLinear::Packed : detail::Bf16DotPacked {};

bool bf16dot_hardware() { return detail::bf16dot_hw_allowed(); }

namespace {
std::vector<uint32_t> x_pairs(const float* x, int64_t M, int64_t ldx, int64_t cols, int64_t pairs) {
  std::vector<uint32_t> out(M * pairs);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t kp = 0; kp < pairs; ++kp) {
      const float lo = x[m * ldx + 2 * kp], hi = 2 * kp + 1 < cols ? x[m * ldx + 2 * kp + 1] : 0.0f;
      out[m * pairs + kp] = detail::bf16_pair(lo, hi);
    }
  return out;
}
uint16_t weight_bits(const WeightView& w, int64_t r, int64_t c) {
  return c < w.cols ? static_cast<const uint16_t*>(w.data)[r * w.cols + c] : uint16_t{0};
}
void check(const WeightView& w) {
  DSINFER_CHECK(w.format == WeightFormat::kBF16 && w.rows > 0 && w.cols > 0, "bf16 dot linear ", w.name,
                ": needs a non-empty BF16 weight, not ", weight_format_name(w.format));
}
}  // namespace

Bf16DotLinear::Bf16DotLinear() = default;
Bf16DotLinear::~Bf16DotLinear() = default;
Bf16DotLinear::Bf16DotLinear(Bf16DotLinear&&) noexcept = default;
Bf16DotLinear& Bf16DotLinear::operator=(Bf16DotLinear&&) noexcept = default;

Bf16DotLinear::Bf16DotLinear(const WeightView& w) {
  check(w);
  auto p = std::make_unique<Packed>();
  p->rows = w.rows;
  p->cols = w.cols;
  p->panels = (w.rows + 15) / 16;
  p->pairs = (w.cols + 1) / 2;
  p->data = detail::allocate_bytes(p->lane_count() * 4);  // zeroed: the padding rows and odd partner
  auto* lanes = reinterpret_cast<uint32_t*>(p->data.get());
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t kp = 0; kp < p->pairs; ++kp)
      lanes[p->panel_offset(r / 16) + kp * p->kp_stride(r / 16) + r % 16] =
          weight_bits(w, r, 2 * kp) | (uint32_t{weight_bits(w, r, 2 * kp + 1)} << 16);
  packed_ = std::move(p);
}

int64_t Bf16DotLinear::rows() const { return packed_ ? packed_->rows : 0; }
int64_t Bf16DotLinear::cols() const { return packed_ ? packed_->cols : 0; }
int64_t Bf16DotLinear::bytes() const { return packed_ ? packed_->lane_count() * 4 : 0; }

void Bf16DotLinear::forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                                 int64_t row_end) const {
  DSINFER_CHECK(packed_ != nullptr, "bf16 dot linear: forward on an empty weight");
  DSINFER_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= packed_->rows && row_begin % 16 == 0 &&
                    (row_end % 16 == 0 || row_end == packed_->rows),
                "bf16 dot linear: rows [", row_begin, ", ", row_end, ") are not whole panels of ", packed_->rows);
  if (M <= 0 || row_begin == row_end) return;
  const auto xp = x_pairs(x, M, ldx, packed_->cols, packed_->pairs);
  HWY_DYNAMIC_DISPATCH(detail::Bf16DotForward)(*packed_, xp.data(), M, y, ldy, row_begin / 16, (row_end + 15) / 16);
}

void Bf16DotLinear::forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
                            core::ThreadPool* pool) const {
  DSINFER_CHECK(packed_ != nullptr, "bf16 dot linear: forward on an empty weight");
  if (M <= 0) return;
  const auto xp = x_pairs(x, M, ldx, packed_->cols, packed_->pairs);
  auto run = [&](int64_t pb, int64_t pe) {
    HWY_DYNAMIC_DISPATCH(detail::Bf16DotForward)(*packed_, xp.data(), M, y, ldy, pb, pe);
  };
  if (pool == nullptr || pool->size() == 1) {
    run(0, packed_->panels);
    return;
  }
  pool->parallel_for(packed_->panels, 4, run);
}

void bf16dot_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy) {
  check(w);
  const int64_t pairs = (w.cols + 1) / 2;
  const auto xp = x_pairs(x, M, ldx, w.cols, pairs);
  std::vector<uint32_t> row(pairs);
  for (int64_t n = 0; n < w.rows; ++n) {
    for (int64_t kp = 0; kp < pairs; ++kp)
      row[kp] = weight_bits(w, n, 2 * kp) | (uint32_t{weight_bits(w, n, 2 * kp + 1)} << 16);
    for (int64_t m = 0; m < M; ++m)
      y[m * ldy + n] = detail::bf16dot_scalar(row.data(), 1, xp.data() + m * pairs, pairs);
  }
}

}  // namespace dsinfer::kernels
#endif  // HWY_ONCE
