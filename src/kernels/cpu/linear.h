// Products with checkpoint weights: y = x · Wᵀ for W stored as F32, BF16, FP8 E4M3 with 128×128 block
// scales, or FP4 E2M1 with 1×32 scales (model-v4.md §4.3). Activations and accumulation are fp32.
#pragma once

#include <cstdint>
#include <memory>

#include "core/thread_pool.h"

namespace dsinfer::kernels {

enum class WeightFormat : uint8_t { kF32, kBF16, kFP8, kFP4 };

// A weight as the checkpoint stores it; not owned.
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (logical elements; FP4 data holds cols/2 bytes per row)
  const void* data = nullptr;
  // FP8: [ceil(rows/128)][ceil(cols/128)]; FP4: [rows][cols/32]. E8M0 codes, or F32 when scales_f32.
  const void* scales = nullptr;
  bool scales_f32 = false;
};

// Exact fp32 value of W[row][col].
float weight_at(const WeightView& w, int64_t row, int64_t col);

// A weight prepared for fast products. It may hold a repacked copy, so the view's memory is only read
// while constructing. Every output element is computed with one fixed operation order, whatever M, the
// other rows of x or the number of threads: results are batch invariant bit for bit.
class Linear {
 public:
  Linear() = default;
  explicit Linear(const WeightView& w);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  int64_t rows() const { return view_.rows; }
  int64_t cols() const { return view_.cols; }
  const WeightView& view() const { return view_; }
  bool empty() const { return view_.data == nullptr; }

  // y[m*ldy + n] = Σ_k x[m*ldx + k] · W[n][k] for m < M, n < rows(). pool == nullptr runs on the
  // calling thread only (for callers that parallelise over something else, e.g. experts).
  void forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool) const;

  // Rows [row_begin, row_end) of the output only (y still indexed by absolute n).
  void forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                    int64_t row_end) const;

 private:
  struct Packed;
  WeightView view_;
  std::unique_ptr<Packed> packed_;
};

// The plain scalar oracle for Linear::forward (double accumulation is NOT used: fp32, k ascending).
void linear_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy);

}  // namespace dsinfer::kernels
