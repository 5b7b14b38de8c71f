// Rotary position embedding as DeepSeek-V4 uses it (model-v4.md §2.4.1): interleaved pairs (2i, 2i+1)
// of the rotary slice, θ_i(p) = p · f_i, optional YaRN frequency correction without mscale. Scalar
// code: a few dozen pairs per vector, far below the cost of anything around it.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer::kernels {

struct RopeSpec {
  int64_t rope_dims = 64;  // rotary dims (even)
  double base = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_seq_len = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

// f_i for i < rope_dims/2, in fp32 exactly as the reference evaluates them (fp32 pow, fp32 ramp).
std::vector<float> rope_frequencies(const RopeSpec& spec);

// cos/sin of the fp32 angle float(pos) · f_i for every pair.
void rope_cos_sin(const float* freqs, int64_t pairs, int64_t pos, float* cos_out, float* sin_out);

// Rotates the interleaved pairs of x in place by +θ (inverse = false) or −θ (inverse = true).
void rope_rotate(float* x, const float* cos_v, const float* sin_v, int64_t pairs, bool inverse);

}  // namespace dsinfer::kernels
