#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsinfer::kernels {

std::vector<float> rope_frequencies(const RopeSpec& spec) {
  DSINFER_CHECK(spec.rope_dims > 0 && spec.rope_dims % 2 == 0, "rope dims must be positive and even, got ",
                spec.rope_dims);
  const int64_t dim = spec.rope_dims;
  const int64_t pairs = dim / 2;
  std::vector<float> f(pairs);
  const float base = static_cast<float>(spec.base);
  for (int64_t i = 0; i < pairs; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    f[i] = 1.0f / std::pow(base, e);
  }
  if (spec.yarn && spec.original_seq_len > 0) {
    // The dims whose wavelength crosses [beta_slow, beta_fast] rotations over the original length
    // are interpolated linearly between scaled (f/factor) and unscaled frequencies.
    auto correction_dim = [&](double rotations) {
      return static_cast<double>(dim) * std::log(static_cast<double>(spec.original_seq_len) / (rotations * 2 * M_PI)) /
             (2 * std::log(spec.base));
    };
    double low = std::max(std::floor(correction_dim(spec.beta_fast)), 0.0);
    double high = std::min(std::ceil(correction_dim(spec.beta_slow)), static_cast<double>(dim - 1));
    if (low == high) high += 0.001;
    const float lowf = static_cast<float>(low);
    const float span = static_cast<float>(high - low);
    const float factor = static_cast<float>(spec.factor);
    for (int64_t i = 0; i < pairs; ++i) {
      const float ramp = std::clamp((static_cast<float>(i) - lowf) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      f[i] = f[i] / factor * (1.0f - smooth) + f[i] * smooth;
    }
  }
  return f;
}

void rope_cos_sin(const float* freqs, int64_t pairs, int64_t pos, float* cos_out, float* sin_out) {
  const float p = static_cast<float>(pos);
  for (int64_t i = 0; i < pairs; ++i) {
    const double angle = static_cast<double>(p * freqs[i]);
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void rope_rotate(float* x, const float* cos_v, const float* sin_v, int64_t pairs, bool inverse) {
  for (int64_t i = 0; i < pairs; ++i) {
    const float re = x[2 * i];
    const float im = x[2 * i + 1];
    const float c = cos_v[i];
    const float s = inverse ? -sin_v[i] : sin_v[i];
    x[2 * i] = re * c - im * s;
    x[2 * i + 1] = re * s + im * c;
  }
}

}  // namespace dsinfer::kernels
