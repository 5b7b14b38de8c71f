// Products with checkpoint weights: y = x · Wᵀ for W stored as F32, BF16, FP8 E4M3 with B×B block
// scales (B = 128 in V4, 32 in V4.1), or FP4 E2M1 with 1×32 scales (model-v4.md §4.3). Activations and
// accumulation are fp32.
//
// Numerics (the contract every backend keeps). F32, BF16 and FP8: each output is
//   y[m][n] = (((0 + x[m][0]·W[n][0]) + x[m][1]·W[n][1]) + ...) + x[m][K-1]·W[n][K-1]
// summed in k order, one rounding per step (a fused multiply-add on AVX2/AVX-512; a rounded product and
// a rounded add on targets without FMA), with W[n][k] the exact fp32 value of the weight.
// FP4 (scales per row and 32 columns): with E_m the exponent of the largest finite |x[m][k]|,
//   part_g = Σ_{k in group g, ascending} x[m][k]·2^-E_m · e2m1[n][k]      (same one-rounding steps)
//   y[m][n] = 2^E_m · Σ_{g ascending} part_g · scale[n][g]                  (fused multiply-adds)
// (the 2^-E_m keeps the partial sums in the normal range; it is exact, a power of two).
// The result of an element never depends on M, on the other rows of x, on the thread count, or (among
// FMA targets) on the vector width: products are batch invariant bit for bit. Every result is within
// K·2^-24·Σ_k|x[m][k]·W[n][k]| of the exact sum, like the oracle linear_reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/thread_pool.h"

namespace dsinfer::kernels {

enum class WeightFormat : uint8_t { kF32, kBF16, kFP8, kFP4 };

const char* weight_format_name(WeightFormat format);

// A weight as the checkpoint stores it; not owned.
struct WeightView {
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;  // output features
  int64_t cols = 0;  // input features (logical elements; FP4 data holds cols/2 bytes per row)
  const void* data = nullptr;
  // FP8: [ceil(rows/B)][ceil(cols/B)], B = fp8_block; FP4: [rows][cols/32]. E8M0 codes, or F32 when
  // scales_f32.
  const void* scales = nullptr;
  bool scales_f32 = false;
  std::string name;  // for error messages only (e.g. "layers.0.attn.wq_a"); may be empty
  // FP8: the edge B of the square scale blocks (the checkpoint's weight_block_size), a positive multiple
  // of 16 (a panel of 16 output rows shares one scale per block).
  int64_t fp8_block = 128;
};

// Bytes of the weight's data and scales as the checkpoint stores them.
int64_t weight_bytes(const WeightView& w);

// Rows [begin, end) of w as a weight of its own (e.g. one group of a grouped projection). FP8 needs
// begin (and end, unless it is rows) to be a multiple of fp8_block, the scale block size.
WeightView slice_rows(const WeightView& w, int64_t begin, int64_t end);

// Exact fp32 value of W[row][col].
float weight_at(const WeightView& w, int64_t row, int64_t col);

struct LinearCall;

// How a Linear computes an FP8 weight: kExact as above, or kBf16Dot, bf16 dot products on bf16-rounded
// activations (the numerics of linear_fp8bf16.h; `--numerics fast` on a CPU with AVX-512 BF16). Other
// formats ignore it.
enum class Fp8Products : uint8_t { kExact, kBf16Dot };
// How a Linear computes a BF16 weight: kExact (fp32 as above), or kBf16Dot, the numerics of
// linear_bf16dot.h (bf16-rounded activations, vdpbf16ps; `--numerics fast` on AVX-512 BF16 for the
// compressors' wkv/wgate). Other formats ignore it.
enum class Bf16Products : uint8_t { kExact, kBf16Dot };

// A weight prepared for fast products. It holds a repacked copy of the weight (the same compressed size
// plus padding of the rows to a multiple of 16), so the view's memory is only read while constructing;
// view() keeps the original pointers, which need not stay valid. Construction rejects NaN codes (FP8
// 0x7F/0xFF, E8M0 0xFF) and non-finite F32 scales, naming the weight and the position.
class Linear {
 public:
  Linear();  // empty; out of line so that types holding a Linear by value need not see Packed
  explicit Linear(const WeightView& w, Fp8Products fp8 = Fp8Products::kExact,
                  Bf16Products bf16 = Bf16Products::kExact);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;

  int64_t rows() const { return view_.rows; }
  int64_t cols() const { return view_.cols; }
  WeightFormat format() const { return view_.format; }
  const WeightView& view() const { return view_; }
  bool empty() const { return packed_ == nullptr; }
  // Whether products run as bf16 dot products (Fp8Products::kBf16Dot on an FP8 weight, or
  // Bf16Products::kBf16Dot on a BF16 one).
  bool bf16_dot() const;
  // Bytes this Linear holds (repacked data and scales).
  int64_t bytes() const;

  // y[m*ldy + n] = Σ_k x[m*ldx + k] · W[n][k] for m < M, n < rows(). pool == nullptr runs on the
  // calling thread only (for callers that parallelise over something else, e.g. experts).
  void forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool) const;

  // Rows [row_begin, row_end) of the output only (y still indexed by absolute n), on the calling thread.
  void forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                    int64_t row_end) const;

  struct Packed;

 private:
  friend void linear_forward_many(std::span<const LinearCall> calls, core::ThreadPool* pool, int64_t n_extra,
                                  const std::function<void(int64_t)>& extra);
  WeightView view_;
  std::unique_ptr<Packed> packed_;
};

// One product of a batch run by linear_forward_many.
struct LinearCall {
  const Linear* linear = nullptr;
  const float* x = nullptr;
  int64_t M = 0;
  int64_t ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Runs several independent products (e.g. the w1/w3 of every routed expert of a token batch, or the
// projections that share one input) in one parallel region: one fork/join instead of one per product.
// Each product gives bitwise the result of its own Linear::forward. pool == nullptr: calling thread.
void linear_forward_many(std::span<const LinearCall> calls, core::ThreadPool* pool);
// The same region also runs extra(t) for t < n_extra, claimed before the products' tasks: other
// independent work of the same phase (e.g. the int8 routed experts next to the shared expert's
// products) joins it instead of paying a fork/join and a tail of its own. Each extra task runs on one
// thread, so its result does not depend on the thread count either.
void linear_forward_many(std::span<const LinearCall> calls, core::ThreadPool* pool, int64_t n_extra,
                         const std::function<void(int64_t)>& extra);

// The plain scalar oracle for Linear::forward (fp32, k ascending, product and sum rounded separately).
void linear_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy);

}  // namespace dsinfer::kernels
