// Scalar implementation; the SIMD version replaces forward_rows with per-target code.
#include "kernels/cpu/linear.h"

#include "core/dtypes.h"
#include "core/error.h"

namespace dsinfer::kernels {

struct Linear::Packed {};

float weight_at(const WeightView& w, int64_t row, int64_t col) {
  switch (w.format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(w.data)[row * w.cols + col];
    case WeightFormat::kBF16:
      return core::bf16_to_float(static_cast<const uint16_t*>(w.data)[row * w.cols + col]);
    case WeightFormat::kFP8: {
      const int64_t scale_cols = (w.cols + 127) / 128;
      const int64_t s = (row / 128) * scale_cols + col / 128;
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

Linear::Linear(const WeightView& w) : view_(w) {
  DSINFER_CHECK(w.format != WeightFormat::kFP4 || w.cols % 32 == 0, "FP4 weight needs cols % 32 == 0, got ", w.cols);
}
Linear::~Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;

void Linear::forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                          int64_t row_end) const {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = row_begin; n < row_end; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < view_.cols; ++k) acc += x[m * ldx + k] * weight_at(view_, n, k);
      y[m * ldy + n] = acc;
    }
  }
}

void Linear::forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool) const {
  if (pool == nullptr) {
    forward_rows(x, M, ldx, y, ldy, 0, view_.rows);
    return;
  }
  pool->parallel_for(view_.rows, 16, [&](int64_t b, int64_t e) { forward_rows(x, M, ldx, y, ldy, b, e); });
}

}  // namespace dsinfer::kernels
