// Clamped SwiGLU of DeepSeek-V4 experts (model-v4.md §2.11): g = min(g, limit), u = clamp(u, ±limit),
// out = silu(g) · u · weight (the route weight is applied before the down projection). limit <= 0
// disables the clamps.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

void swiglu(const float* gate, const float* up, int64_t n, float limit, float weight, float* out);
void swiglu_scalar(const float* gate, const float* up, int64_t n, float limit, float weight, float* out);

}  // namespace dsinfer::kernels
