// The small numerics of the V4.1 forward's glue (private to model/deepseek_v41): double accumulation,
// RMSNorm, the fp32 RoPE frequencies and the rotation in double, the compressed KV's QDQ, top-k. They
// follow the float64 reference's order of operations, which is why they are not V4's (fp32) ones: see
// src/model/layers/README.md.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsinfer::model::deepseek_v41::detail {

using Vec = std::vector<float>;

// a . b accumulated in double.
inline double dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Row-wise RMSNorm over the last dim n (weight may be empty: no weight).
Vec rms_norm(const Vec& x, int64_t n, const Vec& weight, double eps);

// §2.4.1: the fp32 inverse frequencies of a layer (ratio 0: rope_theta, no YaRN; else compressed with YaRN).
std::vector<float> inv_freqs(const ModelConfig& c, int64_t ratio);

// Interleaved RoPE on the last rd dims of a vector of n dims at position pos (sign -1: inverse).
void rope(float* v, int64_t n, int64_t rd, const std::vector<float>& f, int64_t pos, double sign = 1.0);

// §2.10: the cached vectors' QDQ blocks (window KV and DSpark rings FP8, index queries and keys FP4,
// power-of-two scales: V4's kernels::fp8_block_qdq / fp4_block_qdq, with V4.1's block of 32).
inline constexpr int64_t kKvQdqBlock = 32;

// §2.10: the compressed KV's FP4 QDQ with an E4M3 scale per 16 values (V4.1's own codec); n % 16 == 0.
void qdq_fp4_e4m3_scale(float* v, int64_t n);
// Its compact form (§3.1: 256 + 32 B at head_dim 512): FP4 E2M1 codes packed two per byte (element 2c
// in the low nibble) and an E4M3 scale per 16 values. decode(encode(v)) is qdq_fp4_e4m3_scale(v)
// bit for bit. encode_exact: codes for values already on that grid (decoded ones, as a state range
// carries them), which encode need not reproduce (a tiny block's scale may round up, leaving its
// amax at 4 times the scale); false if some block has none.
inline constexpr int64_t kCkvScaleBlock = 16;
void fp4_e4m3_scale_encode(const float* v, int64_t n, uint8_t* packed, uint8_t* scales);
void fp4_e4m3_scale_decode(const uint8_t* packed, const uint8_t* scales, int64_t n, float* y);
bool fp4_e4m3_scale_encode_exact(const float* v, int64_t n, uint8_t* packed, uint8_t* scales);

// Indices of the k largest finite values; exact ties go to the lower index.
std::vector<int64_t> topk(const std::vector<double>& score, int64_t k);

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace dsinfer::model::deepseek_v41::detail
