// RMSNorm: y = x · rsqrt(mean(x²) + eps) · w, fp32 (model-v4.md §2.2). `w` may be null for the
// scale-free per-head query normalisation (§2.4 step 3).
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

// 1 / sqrt(mean(x²) + eps)
float rms_inv(const float* x, int64_t n, float eps);
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* y);

float rms_inv_scalar(const float* x, int64_t n, float eps);
void rmsnorm_scalar(const float* x, const float* w, int64_t n, float eps, float* y);

}  // namespace dsinfer::kernels
