// Fp4Int8Linear: activation quantization, repacking of FP4 weights into the layout of
// linear_int8_packed.h, the scalar oracle, and the split of a product over threads (by panels of
// output rows only, so nothing in an output's order depends on the thread count).
#include "kernels/cpu/linear_int8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/linear_int8_packed.h"

namespace dsinfer::kernels {

using detail::allocate_bytes;
using detail::Int8PackedWeight;
using detail::kInt8Group;
using detail::kInt8OctetBytes;
using detail::kInt8PanelRows;

struct Fp4Int8Linear::Packed : Int8PackedWeight {};

float Int8PackedWeight::half_scale_at(int64_t at) const {
  return bf16_scales ? std::bit_cast<float>(uint32_t{half_scale_bf16()[at]} << 16) : half_scale_f32()[at];
}

namespace {

// 2·e2m1 of a 4-bit code: exact small integers.
constexpr int8_t kE2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

uint8_t fp4_code(const WeightView& w, int64_t n, int64_t k) {
  const uint8_t b = static_cast<const uint8_t*>(w.data)[n * (w.cols / 2) + k / 2];
  return (k & 1) ? (b >> 4) : (b & 0xF);
}

float fp4_scale(const WeightView& w, int64_t n, int64_t g) {
  const int64_t index = n * (w.cols / kInt8Group) + g;
  if (w.scales_f32) {
    const float s = static_cast<const float*>(w.scales)[index];
    DSINFER_CHECK(std::isfinite(s), "int8 linear ", w.name, ": FP4 group scale [", n, ", ", g, "] is not finite");
    return s;
  }
  const uint8_t code = static_cast<const uint8_t*>(w.scales)[index];
  DSINFER_CHECK(code != 0xFF, "int8 linear ", w.name, ": FP4 group scale [", n, ", ", g,
                "] is the E8M0 NaN code 0xFF");
  return core::e8m0_to_float(code);
}

void check_view(const WeightView& w) {
  DSINFER_CHECK(w.format == WeightFormat::kFP4, "int8 linear ", w.name, ": needs an FP4 weight, not ",
                weight_format_name(w.format));
  DSINFER_CHECK(w.rows > 0 && w.cols > 0 && w.cols % kInt8Group == 0, "int8 linear ", w.name,
                ": FP4 weight needs cols % 32 == 0 (", w.rows, " x ", w.cols, ")");
}

void check_block(int64_t block) {
  DSINFER_CHECK(block > 0 && block % kInt8Group == 0, "int8 linear: activation block ", block,
                " is not a positive multiple of 32");
}

}  // namespace

int64_t int8_block_count(int64_t K, int64_t block) { return (K + block - 1) / block; }

void quantize_int8_blocks(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t block, int8_t* q,
                          int64_t ldq, float* xs, int64_t lds) {
  DSINFER_CHECK(block > 0, "int8 quantization: block ", block, " is not positive");
  detail::int8_quantize_blocks(x, M, ldx, K, block, q, ldq, xs, lds);
}

void fp4_int8_reference(const WeightView& w, const int8_t* q, int64_t ldq, const float* xs, int64_t lds, int64_t M,
                        int64_t block, float* y, int64_t ldy) {
  check_view(w);
  check_block(block);
  const int64_t groups = w.cols / kInt8Group;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < w.rows; ++n) {
      float acc = 0.0f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t k = g * kInt8Group; k < (g + 1) * kInt8Group; ++k)
          dot += static_cast<int32_t>(q[m * ldq + k]) * kE2M1x2[fp4_code(w, n, k)];
        const float c = xs[m * lds + g * kInt8Group / block] * (fp4_scale(w, n, g) * 0.5f);
        acc = std::fma(static_cast<float>(dot), c, acc);
      }
      y[m * ldy + n] = acc;
    }
  }
}

Fp4Int8Linear::Fp4Int8Linear() = default;
Fp4Int8Linear::~Fp4Int8Linear() = default;
Fp4Int8Linear::Fp4Int8Linear(Fp4Int8Linear&&) noexcept = default;
Fp4Int8Linear& Fp4Int8Linear::operator=(Fp4Int8Linear&&) noexcept = default;

Fp4Int8Linear::Fp4Int8Linear(const WeightView& w) {
  check_view(w);
  auto p = std::make_unique<Packed>();
  p->rows = w.rows;
  p->cols = w.cols;
  p->panels = (w.rows + kInt8PanelRows - 1) / kInt8PanelRows;
  p->groups = w.cols / kInt8Group;
  const int64_t octets = w.cols / 8;
  p->nibble_bytes = p->panels * octets * kInt8OctetBytes;
  p->nibbles = allocate_bytes(p->nibble_bytes);
  std::vector<float> half_scale(p->panels * p->groups * kInt8PanelRows, 0.0f);
  for (int64_t n = 0; n < w.rows; ++n) {
    const int64_t pn = n / kInt8PanelRows, r = n % kInt8PanelRows;
    uint8_t* panel = p->nibbles.get() + pn * octets * kInt8OctetBytes;
    for (int64_t o = 0; o < octets; ++o) {
      for (int64_t j = 0; j < 4; ++j) {
        const uint8_t lo = fp4_code(w, n, 8 * o + j), hi = fp4_code(w, n, 8 * o + 4 + j);
        panel[o * kInt8OctetBytes + 4 * r + j] = static_cast<uint8_t>(lo | (hi << 4));
      }
    }
    for (int64_t g = 0; g < p->groups; ++g) {
      const int64_t at = (pn * p->groups + g) * kInt8PanelRows + r;
      half_scale[at] = fp4_scale(w, n, g) * 0.5f;
    }
  }
  p->bf16_scales = std::all_of(half_scale.begin(), half_scale.end(),
                               [](float s) { return (std::bit_cast<uint32_t>(s) & 0xFFFFu) == 0; });
  p->half_scale_bytes = static_cast<int64_t>(half_scale.size()) * (p->bf16_scales ? 2 : 4);
  p->half_scales = allocate_bytes(p->half_scale_bytes);
  if (p->bf16_scales) {
    auto* dst = reinterpret_cast<uint16_t*>(p->half_scales.get());
    for (size_t i = 0; i < half_scale.size(); ++i)
      dst[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(half_scale[i]) >> 16);
  } else {
    std::memcpy(p->half_scales.get(), half_scale.data(), half_scale.size() * 4);
  }
  packed_ = std::move(p);
}

int64_t Fp4Int8Linear::rows() const { return packed_ ? packed_->rows : 0; }
int64_t Fp4Int8Linear::cols() const { return packed_ ? packed_->cols : 0; }

int64_t Fp4Int8Linear::bytes() const {
  if (!packed_) return 0;
  return packed_->nibble_bytes + packed_->half_scale_bytes;
}

void Fp4Int8Linear::forward_quantized(const int8_t* q, int64_t ldq, const float* xs, int64_t lds, int64_t M,
                                      int64_t block, float* y, int64_t ldy, core::ThreadPool* pool) const {
  DSINFER_CHECK(packed_ != nullptr, "int8 linear: forward on an empty weight");
  check_block(block);
  if (M <= 0) return;
  const Packed& w = *packed_;
  auto run = [&](int64_t pb, int64_t pe) { detail::int8_packed_forward(w, q, ldq, xs, lds, M, block, y, ldy, pb, pe); };
  // A fork/join costs about a microsecond; small products stay on the calling thread.
  constexpr int64_t kInlineMacs = 48 * 1024;
  if (pool == nullptr || pool->size() == 1 || M * w.rows * w.cols < kInlineMacs) {
    run(0, w.panels);
    return;
  }
  pool->parallel_for(w.panels, 1, run);
}

void Fp4Int8Linear::forward(const float* x, int64_t M, int64_t ldx, int64_t block, float* y, int64_t ldy,
                            core::ThreadPool* pool) const {
  DSINFER_CHECK(packed_ != nullptr, "int8 linear: forward on an empty weight");
  check_block(block);
  const int64_t K = packed_->cols, blocks = int8_block_count(K, block);
  std::vector<int8_t> q(M * K);
  std::vector<float> xs(M * blocks);
  quantize_int8_blocks(x, M, ldx, K, block, q.data(), K, xs.data(), blocks);
  forward_quantized(q.data(), K, xs.data(), blocks, M, block, y, ldy, pool);
}

}  // namespace dsinfer::kernels
