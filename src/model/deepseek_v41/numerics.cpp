#include "model/deepseek_v41/numerics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>

#include "core/dtypes.h"
#include "kernels/cpu/qdq.h"

namespace dsinfer::model::deepseek_v41::detail {

Vec rms_norm(const Vec& x, int64_t n, const Vec& weight, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    const float* v = x.data() + r * n;
    const double inv = 1.0 / std::sqrt(dot(v, v, n) / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(v[i] * inv * (weight.empty() ? 1.0 : weight[i]));
  }
  return y;
}

std::vector<float> inv_freqs(const ModelConfig& c, int64_t ratio) {
  const int64_t rd = c.qk_rope_head_dim;
  const double base = ratio ? c.compress_rope_theta : c.rope_theta;
  std::vector<float> f(static_cast<size_t>(rd / 2));
  for (int64_t i = 0; i < rd / 2; ++i) {
    f[i] = 1.0f / std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(rd));
  }
  if (ratio && c.rope_scaling && c.rope_scaling->original_max_position_embeddings > 0) {
    const auto& y = *c.rope_scaling;
    auto corr = [&](double rot) {
      return rd * std::log(y.original_max_position_embeddings / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    const double low = std::max(std::floor(corr(y.beta_fast)), 0.0);
    const double high = std::min(std::ceil(corr(y.beta_slow)), static_cast<double>(rd - 1));
    for (int64_t i = 0; i < rd / 2; ++i) {
      const float ramp = std::clamp(static_cast<float>((i - low) / std::max(high - low, 0.001)), 0.0f, 1.0f);
      const float s = 1.0f - ramp;
      f[i] = (f[i] / static_cast<float>(y.factor)) * (1.0f - s) + f[i] * s;
    }
  }
  return f;
}

void rope(float* v, int64_t n, int64_t rd, const std::vector<float>& f, int64_t pos, double sign) {
  float* tail = v + n - rd;
  for (int64_t i = 0; i < rd / 2; ++i) {
    const double a = sign * static_cast<double>(pos) * static_cast<double>(f[i]);
    const double c = std::cos(a), s = std::sin(a);
    const double xr = tail[2 * i], xi = tail[2 * i + 1];
    tail[2 * i] = static_cast<float>(xr * c - xi * s);
    tail[2 * i + 1] = static_cast<float>(xr * s + xi * c);
  }
}

namespace {

// One block of 16 values on the scale s: codes of clamp(v / s) (the division in double, as the reference).
void fp4_block_codes(const float* v, float s, uint8_t* packed) {
  for (int64_t i = 0; i < kCkvScaleBlock; i += 2) {
    uint8_t c[2];
    for (int64_t k = 0; k < 2; ++k) {
      const double q = std::clamp(static_cast<double>(v[i + k]) / s, -6.0, 6.0);
      c[k] = core::float_to_fp4_e2m1(static_cast<float>(q));
    }
    packed[i / 2] = static_cast<uint8_t>(c[0] | (c[1] << 4));
  }
}

float block_amax(const float* v) {
  float amax = 0;
  for (int64_t i = 0; i < kCkvScaleBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
  return amax;
}

bool block_decodes_to(const float* v, const uint8_t* packed, const uint8_t* scale) {
  float y[kCkvScaleBlock];
  fp4_e4m3_scale_decode(packed, scale, kCkvScaleBlock, y);
  return std::memcmp(y, v, sizeof y) == 0;
}

}  // namespace

void fp4_e4m3_scale_encode(const float* v, int64_t n, uint8_t* packed, uint8_t* scales) {
  for (int64_t b = 0; b < n; b += kCkvScaleBlock) {
    const float amax = std::max(block_amax(v + b), 6.0f * 0.001953125f);  // 6 * 2^-9
    const uint8_t sc = core::float_to_fp8_e4m3(std::min(amax / 6.0f, 448.0f));
    scales[b / kCkvScaleBlock] = sc;
    fp4_block_codes(v + b, core::fp8_e4m3_to_float(sc), packed + b / 2);
  }
}

void fp4_e4m3_scale_decode(const uint8_t* packed, const uint8_t* scales, int64_t n, float* y) {
  for (int64_t b = 0; b < n; b += kCkvScaleBlock) {
    kernels::fp4_decode_scaled(packed + b / 2, kCkvScaleBlock, core::fp8_e4m3_to_float(scales[b / kCkvScaleBlock]),
                               y + b);
  }
}

bool fp4_e4m3_scale_encode_exact(const float* v, int64_t n, uint8_t* packed, uint8_t* scales) {
  fp4_e4m3_scale_encode(v, n, packed, scales);
  for (int64_t b = 0; b < n; b += kCkvScaleBlock) {
    uint8_t* p = packed + b / 2;
    uint8_t* sc = scales + b / kCkvScaleBlock;
    if (block_decodes_to(v + b, p, sc)) continue;
    // On the grid of scale s, amax is s times the largest code used: try each.
    bool found = false;
    for (const float top : {6.0f, 4.0f, 3.0f, 2.0f, 1.5f, 1.0f, 0.5f}) {
      const float s = block_amax(v + b) / top;
      *sc = core::float_to_fp8_e4m3(s);
      if (core::fp8_e4m3_to_float(*sc) != s) continue;
      fp4_block_codes(v + b, s, p);
      if ((found = block_decodes_to(v + b, p, sc))) break;
    }
    if (!found) return false;
  }
  return true;
}

void qdq_fp4_e4m3_scale(float* v, int64_t n) {
  uint8_t packed[kCkvScaleBlock / 2], scale;
  for (int64_t b = 0; b < n; b += kCkvScaleBlock) {
    fp4_e4m3_scale_encode(v + b, kCkvScaleBlock, packed, &scale);
    fp4_e4m3_scale_decode(packed, &scale, kCkvScaleBlock, v + b);
  }
}

std::vector<int64_t> topk(const std::vector<double>& score, int64_t k) {
  std::vector<int64_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return score[a] > score[b]; });
  std::vector<int64_t> out;
  for (int64_t i = 0; i < static_cast<int64_t>(idx.size()) && static_cast<int64_t>(out.size()) < k; ++i) {
    if (std::isfinite(score[idx[i]]) || score[idx[i]] > 0) out.push_back(idx[i]);
  }
  return out;
}

}  // namespace dsinfer::model::deepseek_v41::detail
