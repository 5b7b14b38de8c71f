// BF16 weights times bf16-rounded activations on AVX-512 BF16 (vdpbf16ps): the BF16 product of the
// `--numerics fast` mode (the output head, whose weight is BF16).
//
// Numerics, per output (m, n), with xb = bf16(x) (round to nearest even) and k-pairs kp ascending:
//   acc = ftz(acc + W[n][2kp+1]·xb[m][2kp+1]);  acc = ftz(acc + W[n][2kp]·xb[m][2kp])
// the odd element of each pair first, as the instruction defines it. A bf16 × bf16 product is exact in
// fp32, so each step rounds once. The instruction treats subnormal inputs as zero and flushes subnormal
// results to zero (whatever MXCSR says); the oracle does the same (ftz, and bf16 subnormals read as 0).
// An odd cols gets a zero pair partner. Targets without AVX-512 BF16 run the oracle's loop.
#pragma once

#include <cstdint>
#include <memory>

#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"

namespace dsinfer::kernels {

class Bf16DotLinear {
 public:
  Bf16DotLinear();
  explicit Bf16DotLinear(const WeightView& w);  // a BF16 weight
  ~Bf16DotLinear();
  Bf16DotLinear(Bf16DotLinear&&) noexcept;
  Bf16DotLinear& operator=(Bf16DotLinear&&) noexcept;

  int64_t rows() const;
  int64_t cols() const;
  int64_t bytes() const;  // the packed weight

  bool empty() const { return packed_ == nullptr; }

  // y[m*ldy + n] for m < M, n < rows(); split over the pool's threads by panels of 16 output rows
  // (pool == nullptr: the calling thread), which changes no result.
  void forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool = nullptr) const;
  // Outputs [row_begin, row_end) only (y still indexed by absolute n), on the calling thread; row_begin
  // a multiple of 16 (a panel), row_end too unless it is rows(). The same bits as forward.
  void forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t row_begin,
                    int64_t row_end) const;

  struct Packed;

 private:
  std::unique_ptr<Packed> packed_;
};

// Whether forward runs on vdpbf16ps on this CPU (elsewhere it is the oracle's scalar loop: callers that
// want speed keep their fp32 product there).
bool bf16dot_hardware();

// The scalar oracle of the numerics above, from the checkpoint layout.
void bf16dot_reference(const WeightView& w, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy);

namespace detail {
// For tests: false makes the AVX-512 target run the oracle's loop even where the CPU has AVX-512 BF16.
void set_bf16dot_hw_allowed(bool allowed);
}  // namespace detail

}  // namespace dsinfer::kernels
