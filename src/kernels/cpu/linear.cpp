// Linear: validation and repacking of checkpoint weights into the panel layout of linear_packed.h,
// the scalar oracle, and the split of a product over threads (by output rows, and by rows of x for
// short, wide products; never along k, which would change the summation order).
#include "kernels/cpu/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_fp8bf16.h"
#include "kernels/cpu/linear_packed.h"

namespace dsinfer::kernels {

using detail::kFp4Group;
using detail::kPanelRows;
using detail::PackedWeight;

struct Linear::Packed : PackedWeight {
  std::unique_ptr<detail::Fp8Bf16Weight> fp8bf16;  // Fp8Products::kBf16Dot: the weight (data stays empty)
  std::unique_ptr<Bf16DotLinear> bf16dot;           // Bf16Products::kBf16Dot: the weight (data stays empty)
};

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32: return "F32";
    case WeightFormat::kBF16: return "BF16";
    case WeightFormat::kFP8: return "FP8 E4M3";
    case WeightFormat::kFP4: return "FP4 E2M1";
  }
  return "?";
}

namespace {

int64_t scale_elem_bytes(const WeightView& w) { return w.scales_f32 ? 4 : 1; }

int64_t fp8_scale_count(const WeightView& w) {
  const int64_t b = w.fp8_block;
  return ((w.rows + b - 1) / b) * ((w.cols + b - 1) / b);
}

std::string describe(const WeightView& w) {
  return core::str_cat(w.name.empty() ? "" : "'", w.name, w.name.empty() ? "" : "' ", "[", w.rows, ", ", w.cols,
                       "] ", weight_format_name(w.format));
}

float scale_value(const WeightView& w, int64_t index, const char* what, int64_t r, int64_t c) {
  if (w.scales_f32) {
    const float s = static_cast<const float*>(w.scales)[index];
    DSINFER_CHECK(std::isfinite(s), "linear ", describe(w), ": ", what, " scale [", r, ", ", c, "] is not finite (",
                  s, ")");
    return s;
  }
  const uint8_t code = static_cast<const uint8_t*>(w.scales)[index];
  DSINFER_CHECK(code != 0xFF, "linear ", describe(w), ": ", what, " scale [", r, ", ", c, "] is the E8M0 NaN code 0xFF");
  return core::e8m0_to_float(code);
}

uint8_t* alloc_bytes(detail::Bytes& out, int64_t bytes) {
  out = detail::allocate_bytes(bytes);
  return out.get();
}

// The element data of panels [pb, pe): k outer, the panel's 16 rows inner, so the destination is
// written in order (padding rows and the padding k stay zero from the allocation).
template <typename T, typename Place>
void pack_panels(const WeightView& w, PackedWeight& p, int64_t pb, int64_t pe, int64_t row_elems, Place place) {
  const T* src = static_cast<const T*>(w.data);
  for (int64_t pn = pb; pn < pe; ++pn) {
    T* dst = reinterpret_cast<T*>(p.data.get() + pn * p.panel_bytes);
    const T* rows[kPanelRows];
    int nrows = 0;
    for (; nrows < kPanelRows && pn * kPanelRows + nrows < w.rows; ++nrows)
      rows[nrows] = src + (pn * kPanelRows + nrows) * row_elems;
    for (int64_t k = 0; k < row_elems; ++k)
      for (int r = 0; r < nrows; ++r) dst[place(k, r)] = rows[r][k];
  }
}

void pack_f32(const WeightView& w, PackedWeight& p, int64_t pb, int64_t pe) {
  pack_panels<float>(w, p, pb, pe, w.cols, [](int64_t k, int r) { return k * 16 + r; });
}

void pack_bf16(const WeightView& w, PackedWeight& p, int64_t pb, int64_t pe) {
  // u32 lane j = (row j, row j + 8)
  pack_panels<uint16_t>(w, p, pb, pe, w.cols, [](int64_t k, int r) { return k * 16 + (r < 8 ? 2 * r : 2 * (r - 8) + 1); });
}

void pack_fp8(const WeightView& w, PackedWeight& p, int64_t pb, int64_t pe) {
  // Reject NaN codes first (a vectorisable scan; the position only when one is there).
  const uint8_t* src = static_cast<const uint8_t*>(w.data);
  const int64_t r0 = pb * kPanelRows, r1 = std::min(w.rows, pe * kPanelRows);
  for (int64_t n = r0; n < r1; ++n) {
    const uint8_t* row = src + n * w.cols;
    bool bad = false;
    for (int64_t k = 0; k < w.cols; ++k) bad |= (row[k] & 0x7F) == 0x7F;
    if (!bad) continue;
    for (int64_t k = 0; k < w.cols; ++k) {
      DSINFER_CHECK((row[k] & 0x7F) != 0x7F, "linear ", describe(w), ": weight [", n, ", ", k,
                    "] is the FP8 E4M3 NaN code 0x", (row[k] == 0xFF ? "FF" : "7F"));
    }
  }
  // u32 lane r % 8, byte r / 8, + 2 for the odd k of the pair
  pack_panels<uint8_t>(w, p, pb, pe, w.cols,
                       [](int64_t k, int r) { return (k / 2) * 32 + 4 * (r % 8) + r / 8 + 2 * (k & 1); });
}

void pack_fp4(const WeightView& w, PackedWeight& p, int64_t pb, int64_t pe) {
  // k-quad q: u32 lane r % 8, u16 half r / 8, the row's bytes 2q and 2q + 1.
  pack_panels<uint8_t>(w, p, pb, pe, w.cols / 2,
                       [](int64_t c, int r) { return (c / 2) * 32 + 4 * (r % 8) + 2 * (r / 8) + (c % 2); });
}

void pack_fp8_scales(const WeightView& w, PackedWeight& p) {
  const int64_t b = w.fp8_block;
  const int64_t rb = (w.rows + b - 1) / b;
  const int64_t cb = (w.cols + b - 1) / b;
  p.fp8_block = b;
  float* s = reinterpret_cast<float*>(alloc_bytes(p.scales, rb * cb * 4));
  const float bias = std::ldexp(1.0f, detail::kFp8Bias);
  for (int64_t i = 0; i < rb * cb; ++i) {
    s[i] = scale_value(w, i, "FP8 block", i / cb, i % cb);
    if (!std::isfinite(s[i] * bias)) p.two_step_scale = true;
  }
  if (!p.two_step_scale) {
    p.fp8_pow2_factors = true;
    for (int64_t i = 0; i < rb * cb; ++i) {
      s[i] *= bias;
      int e = 0;
      if (!(std::frexp(s[i], &e) == 0.5f && s[i] >= 1.0f)) p.fp8_pow2_factors = false;
      p.fp8_max_factor = std::max(p.fp8_max_factor, s[i]);
    }
  }
  p.fp8_scale_cols = cb;
}

void pack_fp4_scales(const WeightView& w, PackedWeight& p) {
  const int64_t groups = w.cols / kFp4Group;
  p.fp4_scales_f32 = w.scales_f32;
  const int64_t esz = w.scales_f32 ? 4 : 1;
  uint8_t* s = alloc_bytes(p.scales, p.panels * groups * 16 * esz);
  for (int64_t n = 0; n < w.rows; ++n) {
    const int64_t pn = n / kPanelRows, r = n % kPanelRows;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t at = (pn * groups + g) * 16 + r;
      const float v = scale_value(w, n * groups + g, "FP4 group", n, g);  // validates
      if (w.scales_f32) {
        reinterpret_cast<float*>(s)[at] = v;
      } else {
        s[at] = static_cast<const uint8_t*>(w.scales)[n * groups + g];
      }
    }
  }
}

// ---- splitting a product over threads ----

// Products below this many multiply-adds run on the calling thread: a fork/join costs about a
// microsecond, which such a product does not repay.
constexpr int64_t kInlineMacs = 48 * 1024;
constexpr int64_t kTasksPerThread = 4;

struct Split {
  int64_t row_step = 0, row_tasks = 1;
  int64_t m_step = 0, m_tasks = 1;
  int64_t tasks() const { return row_tasks * m_tasks; }
};

// `share`: the product's part of a batch of products run in one region (1 when alone); a batch needs
// fewer tasks per product to keep the threads busy, and each task has a fixed cost.
Split plan_split(int64_t rows, int64_t cols, int64_t M, int threads, double share = 1.0) {
  Split s;
  s.row_step = rows;
  s.m_step = M;
  if (threads <= 1 || rows * cols * M < kInlineMacs) return s;
  // Whole stream groups per task, or single panels when that leaves threads idle.
  const int64_t group = detail::packed_stream_group_rows();
  const int64_t unit = (rows + group - 1) / group >= threads ? group : kPanelRows;
  const int64_t units = (rows + unit - 1) / unit;
  const int64_t want = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(threads * kTasksPerThread * share)));
  s.row_tasks = std::min(units, want);
  s.row_step = ((units + s.row_tasks - 1) / s.row_tasks) * unit;
  s.row_tasks = (rows + s.row_step - 1) / s.row_step;
  // Few output rows but many rows of x (prefill through a narrow weight): split x as well. Each piece
  // decodes its panels again, which is cheap next to the M rows of work.
  const int64_t min_rows = 4 * std::max<int64_t>(detail::packed_stream_max_rows(), 12);
  if (share == 1.0 && s.row_tasks < threads * 2 && M >= 2 * min_rows) {
    const int64_t pieces = std::min((threads * 2 + s.row_tasks - 1) / s.row_tasks, M / min_rows);
    s.m_step = (M + pieces - 1) / pieces;
    s.m_tasks = (M + s.m_step - 1) / s.m_step;
  }
  return s;
}

// Many rows of x through an FP8 bf16-dot weight (prefill): x is converted to bf16 once per product
// into the row blocks of linear_fp8bf16.h, which every task reads. Up to 16 rows each task converts
// its own x (decode: the conversion is small, the weights are the cost).
constexpr int64_t kRowBlocksMinRows = 17;

bool wants_row_blocks(const Linear::Packed& w, int64_t M) { return w.fp8bf16 != nullptr && M >= kRowBlocksMinRows; }

// Buffers for converted x, kept per thread between products: a prefill converts megabytes per
// product, which fresh allocations would fault in page by page every time. A product that needs one
// while the thread's others are taken (several products of one region, or a product inside a task of
// another) takes the next free one.
struct RowBlockBuffers {
  std::vector<std::vector<uint32_t>> buffers;
  std::vector<bool> busy;
};
thread_local RowBlockBuffers t_row_blocks;

class RowBlocks {
 public:
  RowBlocks(const detail::Fp8Bf16Weight& w, const float* x, int64_t M, int64_t ldx) : x_(x), M_(M), ldx_(ldx), cols_(w.cols) {
    RowBlockBuffers& b = t_row_blocks;
    while (slot_ < b.busy.size() && b.busy[slot_]) ++slot_;
    if (slot_ == b.busy.size()) {
      b.buffers.emplace_back();
      b.busy.push_back(false);
    }
    b.busy[slot_] = true;
    auto& buf = b.buffers[slot_];
    const auto n = static_cast<size_t>(detail::fp8bf16_row_blocks_size(w, M));
    if (buf.size() < n) buf.resize(n);
    data_ = buf.data();
    detail::fp8bf16_to_row_blocks(w, x, M, ldx, data_);
  }
  ~RowBlocks() { t_row_blocks.busy[slot_] = false; }
  RowBlocks(const RowBlocks&) = delete;
  RowBlocks& operator=(const RowBlocks&) = delete;
  const uint32_t* data() const { return data_; }
  // Whether this conversion also serves a product of the same x (row blocks depend only on x and cols).
  bool same(const float* x, int64_t M, int64_t ldx, int64_t cols) const {
    return x == x_ && M == M_ && ldx == ldx_ && cols == cols_;
  }

 private:
  size_t slot_ = 0;
  uint32_t* data_ = nullptr;
  const float* x_;
  int64_t M_, ldx_, cols_;
};

void compute(const Linear::Packed& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_lo,
             int64_t row_hi) {
  if (wants_row_blocks(w, M)) {
    const RowBlocks xb(*w.fp8bf16, x, M, ldx);
    detail::fp8bf16_forward_row_blocks(*w.fp8bf16, xb.data(), M, 0, M, y, ldy, row_lo, row_hi);
  } else if (w.fp8bf16) {
    detail::fp8bf16_forward(*w.fp8bf16, x, M, ldx, y, ldy, row_lo, row_hi);
  } else if (w.bf16dot) {
    w.bf16dot->forward_rows(x, M, ldx, y, ldy, row_lo, row_hi);
  } else {
    detail::packed_forward(w, x, M, ldx, y, ldy, row_lo, row_hi);
  }
}

// xblocks: x already converted for the whole product (wants_row_blocks), else null.
void run_task(const Linear::Packed& w, const Split& s, int64_t t, const float* x, int64_t M, int64_t ldx, float* y,
              int64_t ldy, const uint32_t* xblocks) {
  const int64_t rt = t % s.row_tasks, mt = t / s.row_tasks;
  const int64_t r0 = rt * s.row_step, r1 = std::min(w.rows, r0 + s.row_step);
  const int64_t m0 = mt * s.m_step, m1 = std::min(M, m0 + s.m_step);
  if (xblocks != nullptr) {
    detail::fp8bf16_forward_row_blocks(*w.fp8bf16, xblocks, M, m0, m1, y + m0 * ldy, ldy, r0, r1);
  } else {
    compute(w, x + m0 * ldx, m1 - m0, ldx, y + m0 * ldy, ldy, r0, r1);
  }
}

void check_call(const Linear& l, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy) {
  DSINFER_CHECK(!l.empty(), "Linear::forward on an empty Linear");
  DSINFER_CHECK(M >= 0 && ldx >= l.cols() && ldy >= l.rows(), "Linear::forward ", describe(l.view()), ": M=", M,
                " ldx=", ldx, " ldy=", ldy, " (need ldx >= cols, ldy >= rows)");
  DSINFER_CHECK(M == 0 || (x != nullptr && y != nullptr), "Linear::forward: null input or output");
}

}  // namespace

int64_t detail::PackedWeight::bytes() const {
  int64_t b = panels * panel_bytes;
  switch (format) {
    case WeightFormat::kFP8: b += ((rows + fp8_block - 1) / fp8_block) * fp8_scale_cols * 4; break;
    case WeightFormat::kFP4: b += panels * (cols / kFp4Group) * 16 * (fp4_scales_f32 ? 4 : 1); break;
    default: break;
  }
  return b;
}

int64_t weight_bytes(const WeightView& w) {
  switch (w.format) {
    case WeightFormat::kF32: return w.rows * w.cols * 4;
    case WeightFormat::kBF16: return w.rows * w.cols * 2;
    case WeightFormat::kFP8: return w.rows * w.cols + fp8_scale_count(w) * scale_elem_bytes(w);
    case WeightFormat::kFP4: return w.rows * w.cols / 2 + w.rows * (w.cols / kFp4Group) * scale_elem_bytes(w);
  }
  return 0;
}

WeightView slice_rows(const WeightView& w, int64_t begin, int64_t end) {
  DSINFER_CHECK(0 <= begin && begin < end && end <= w.rows, "slice_rows of ", describe(w), ": bad range [", begin,
                ", ", end, ")");
  WeightView s = w;
  s.rows = end - begin;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint8_t*>(w.scales);
  switch (w.format) {
    case WeightFormat::kF32: s.data = data + begin * w.cols * 4; break;
    case WeightFormat::kBF16: s.data = data + begin * w.cols * 2; break;
    case WeightFormat::kFP8:
      DSINFER_CHECK(begin % w.fp8_block == 0 && (end % w.fp8_block == 0 || end == w.rows), "slice_rows of ",
                    describe(w), ": FP8 rows [", begin, ", ", end, ") do not follow the ", w.fp8_block,
                    "-row scale blocks");
      s.data = data + begin * w.cols;
      s.scales = scales + (begin / w.fp8_block) * ((w.cols + w.fp8_block - 1) / w.fp8_block) * scale_elem_bytes(w);
      break;
    case WeightFormat::kFP4:
      s.data = data + begin * (w.cols / 2);
      s.scales = scales + begin * (w.cols / kFp4Group) * scale_elem_bytes(w);
      break;
  }
  return s;
}

float weight_at(const WeightView& w, int64_t row, int64_t col) {
  switch (w.format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(w.data)[row * w.cols + col];
    case WeightFormat::kBF16:
      return core::bf16_to_float(static_cast<const uint16_t*>(w.data)[row * w.cols + col]);
    case WeightFormat::kFP8: {
      const int64_t b = w.fp8_block;
      const int64_t s = (row / b) * ((w.cols + b - 1) / b) + col / b;
      const float scale = w.scales_f32 ? static_cast<const float*>(w.scales)[s]
                                       : core::e8m0_to_float(static_cast<const uint8_t*>(w.scales)[s]);
      return core::fp8_e4m3_to_float(static_cast<const uint8_t*>(w.data)[row * w.cols + col]) * scale;
    }
    case WeightFormat::kFP4: {
      const int64_t s = row * (w.cols / 32) + col / 32;
      const float scale = w.scales_f32 ? static_cast<const float*>(w.scales)[s]
                                       : core::e8m0_to_float(static_cast<const uint8_t*>(w.scales)[s]);
      return core::fp4_packed_get(static_cast<const uint8_t*>(w.data) + row * (w.cols / 2), col) * scale;
    }
  }
  return 0.0f;
}

void linear_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < w.cols; ++k) acc += x[m * ldx + k] * weight_at(w, n, k);
      y[m * ldy + n] = acc;
    }
  }
}

Linear::Linear(const WeightView& w, Fp8Products fp8, Bf16Products bf16) : view_(w) {
  DSINFER_CHECK(w.rows > 0 && w.cols > 0, "linear ", describe(w), ": empty shape");
  DSINFER_CHECK(w.data != nullptr, "linear ", describe(w), ": no data");
  DSINFER_CHECK(w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16 || w.scales != nullptr, "linear ",
                describe(w), ": no scales");
  DSINFER_CHECK(w.format != WeightFormat::kFP4 || w.cols % kFp4Group == 0, "linear ", describe(w),
                ": FP4 weight needs cols % 32 == 0");
  DSINFER_CHECK(w.format != WeightFormat::kFP8 || (w.fp8_block > 0 && w.fp8_block % kPanelRows == 0), "linear ",
                describe(w), ": FP8 scale block ", w.fp8_block, " is not a positive multiple of ", kPanelRows);
  auto p = std::make_unique<Packed>();
  p->format = w.format;
  p->rows = w.rows;
  p->cols = w.cols;
  p->panels = (w.rows + kPanelRows - 1) / kPanelRows;
  p->k_pairs = (w.cols + 1) / 2;
  if (fp8 == Fp8Products::kBf16Dot && w.format == WeightFormat::kFP8) {
    // Its panel layout and per-block chains are built around 128-wide scale blocks (V4); a V4.1
    // 32x32 weight asking for it would be summed against the wrong scales.
    DSINFER_CHECK(w.fp8_block == detail::kFp8Block, "linear ", describe(w), ": the FP8 bf16-dot products need ",
                  detail::kFp8Block, "x", detail::kFp8Block, " scale blocks, not ", w.fp8_block);
    p->fp8bf16 = detail::pack_fp8bf16(w);
    packed_ = std::move(p);
    return;
  }
  if (bf16 == Bf16Products::kBf16Dot && w.format == WeightFormat::kBF16) {
    p->bf16dot = std::make_unique<Bf16DotLinear>(w);
    packed_ = std::move(p);
    return;
  }
  int64_t elem_pair_bytes = 0;  // bytes of one k-pair of one panel
  switch (w.format) {
    case WeightFormat::kF32: elem_pair_bytes = 2 * 16 * 4; break;
    case WeightFormat::kBF16: elem_pair_bytes = 2 * 16 * 2; break;
    case WeightFormat::kFP8: elem_pair_bytes = 2 * 16; break;
    case WeightFormat::kFP4: elem_pair_bytes = 16; break;
  }
  // Panels start on a cache line.
  p->panel_bytes = (p->k_pairs * elem_pair_bytes + 63) / 64 * 64;
  alloc_bytes(p->data, p->panels * p->panel_bytes);
  if (w.format == WeightFormat::kFP8) pack_fp8_scales(w, *p);
  if (w.format == WeightFormat::kFP4) pack_fp4_scales(w, *p);
  auto pack = [&](int64_t pb, int64_t pe) {
    switch (w.format) {
      case WeightFormat::kF32: pack_f32(w, *p, pb, pe); break;
      case WeightFormat::kBF16: pack_bf16(w, *p, pb, pe); break;
      case WeightFormat::kFP8: pack_fp8(w, *p, pb, pe); break;
      case WeightFormat::kFP4: pack_fp4(w, *p, pb, pe); break;
    }
  };
  // Large weights (the head is 265 MB on MEDIUM) are repacked by the global pool; inside a task of a
  // pool this runs inline.
  if (weight_bytes(w) >= (int64_t{8} << 20)) {
    core::ThreadPool::global().parallel_for(p->panels, 64, pack);
  } else {
    pack(0, p->panels);
  }
  packed_ = std::move(p);
}

Linear::Linear() = default;
Linear::~Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;

int64_t Linear::bytes() const {
  if (!packed_) return 0;
  if (packed_->fp8bf16) return packed_->fp8bf16->bytes();
  return packed_->bf16dot ? packed_->bf16dot->bytes() : packed_->bytes();
}

bool Linear::bf16_dot() const { return packed_ && (packed_->fp8bf16 || packed_->bf16dot); }

void Linear::forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                          int64_t row_end) const {
  check_call(*this, x, M, ldx, y, ldy);
  DSINFER_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= rows(), "Linear::forward_rows ", describe(view_),
                ": bad row range [", row_begin, ", ", row_end, ")");
  compute(*packed_, x, M, ldx, y, ldy, row_begin, row_end);
}

void Linear::forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool) const {
  check_call(*this, x, M, ldx, y, ldy);
  if (M == 0) return;
  const Split s = plan_split(rows(), cols(), M, pool ? pool->size() : 1);
  if (s.tasks() == 1) {
    compute(*packed_, x, M, ldx, y, ldy, 0, rows());
    return;
  }
  if (wants_row_blocks(*packed_, M)) {
    const RowBlocks xb(*packed_->fp8bf16, x, M, ldx);
    pool->run(s.tasks(), [&](int64_t t, int) { run_task(*packed_, s, t, x, M, ldx, y, ldy, xb.data()); });
    return;
  }
  pool->run(s.tasks(), [&](int64_t t, int) { run_task(*packed_, s, t, x, M, ldx, y, ldy, nullptr); });
}

void linear_forward_many(std::span<const LinearCall> calls, core::ThreadPool* pool) {
  linear_forward_many(calls, pool, 0, {});
}

void linear_forward_many(std::span<const LinearCall> calls, core::ThreadPool* pool, int64_t n_extra,
                         const std::function<void(int64_t)>& extra) {
  DSINFER_CHECK(n_extra >= 0 && (n_extra == 0 || extra), "linear_forward_many: extra tasks without a function");
  struct Planned {
    const LinearCall* call;
    Split split;
    int64_t first_task;
    const uint32_t* xblocks;
  };
  std::vector<Planned> plan;
  plan.reserve(calls.size());
  int64_t tasks = 0;
  const int threads = pool ? pool->size() : 1;
  double total_macs = 0;
  for (const LinearCall& c : calls) {
    DSINFER_CHECK(c.linear != nullptr, "linear_forward_many: call without a Linear");
    check_call(*c.linear, c.x, c.M, c.ldx, c.y, c.ldy);
    total_macs += static_cast<double>(c.linear->rows()) * static_cast<double>(c.linear->cols()) * static_cast<double>(c.M);
  }
  for (const LinearCall& c : calls) {
    if (c.M == 0) continue;
    // Tasks in proportion to the product's share of the work (at least one each).
    const double macs = static_cast<double>(c.linear->rows()) * static_cast<double>(c.linear->cols()) * static_cast<double>(c.M);
    const Split s = plan_split(c.linear->rows(), c.linear->cols(), c.M, threads, macs / total_macs);
    plan.push_back({&c, s, tasks, nullptr});
    tasks += s.tasks();
  }
  if (tasks + n_extra == 0) return;
  // x of the prefill-sized FP8 bf16-dot products converted once, shared by the products of one x.
  std::deque<RowBlocks> converted;
  for (Planned& p : plan) {
    const LinearCall& c = *p.call;
    if (!wants_row_blocks(*c.linear->packed_, c.M)) continue;
    auto it = std::find_if(converted.begin(), converted.end(),
                           [&](const RowBlocks& b) { return b.same(c.x, c.M, c.ldx, c.linear->cols()); });
    p.xblocks = it != converted.end() ? it->data()
                                      : converted.emplace_back(*c.linear->packed_->fp8bf16, c.x, c.M, c.ldx).data();
  }
  auto task = [&](int64_t t, int) {
    if (t < n_extra) {
      extra(t);
      return;
    }
    t -= n_extra;
    auto it = std::upper_bound(plan.begin(), plan.end(), t,
                               [](int64_t v, const Planned& p) { return v < p.first_task; });
    const Planned& p = *(it - 1);
    const LinearCall& c = *p.call;
    run_task(*c.linear->packed_, p.split, t - p.first_task, c.x, c.M, c.ldx, c.y, c.ldy, p.xblocks);
  };
  if (pool == nullptr || tasks + n_extra == 1) {
    for (int64_t t = 0; t < tasks + n_extra; ++t) task(t, 0);
    return;
  }
  pool->run(tasks + n_extra, task);
}

}  // namespace dsinfer::kernels
