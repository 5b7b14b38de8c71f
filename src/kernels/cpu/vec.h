// Small fp32 vector primitives used by the model's glue (dot products, scaled adds, sums of squares).
// Each result depends only on the inputs and n (fixed lane split and reduction order for the running
// target), never on where the vectors sit in a batch: callers rely on this for batch invariance.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

float dot(const float* a, const float* b, int64_t n);
float sum_squares(const float* x, int64_t n);
// y[i] += a * x[i]
void axpy(float a, const float* x, float* y, int64_t n);
// y[i] = a * x[i]
void scale(float a, const float* x, float* y, int64_t n);

// The first index of the largest value (ties: the lowest index); NaNs never win, so a NaN at index 0
// is kept (as the scalar loop `if (x[i] > x[best]) best = i` does). n > 0.
int64_t argmax_first(const float* x, int64_t n);

// Scalar oracles (plain loops, index ascending).
float dot_scalar(const float* a, const float* b, int64_t n);
float sum_squares_scalar(const float* x, int64_t n);
void axpy_scalar(float a, const float* x, float* y, int64_t n);
void scale_scalar(float a, const float* x, float* y, int64_t n);
int64_t argmax_first_scalar(const float* x, int64_t n);

}  // namespace dsinfer::kernels
