// Attention core with a learned sink (model-v4.md §2.9): for every head h and the attended rows k_j
// (each row is both key and value, MQA with K = V),
//   l_j = scale · (q_h · k_j),  M = max_j l_j,
//   o_h = Σ_j exp(l_j − M) · k_j / (Σ_j exp(l_j − M) + exp(sink_h − M)).
// Rows are given as pointers so callers can attend a window slice and selected compressed entries
// without copying. Every head's result depends only on its query, the rows (in the given order) and
// the sink: batch and thread-count invariant.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtypes.h"

namespace dsinfer::kernels {

struct SinkAttention {
  const float* q = nullptr;           // [heads][dim]
  int64_t heads = 0;
  int64_t dim = 0;
  const float* const* rows = nullptr; // n pointers to `dim` floats
  // Or (rows null) n packed rows: `packed_bf16` bf16 values, then dim - packed_bf16 floats. A KV row's
  // FP8-decoded dims are exact in bf16, so this holds the same values as fp32 rows in about half the
  // bytes, and the result is bitwise the one of those fp32 rows. packed_bf16 is a multiple of 16 (every
  // vector of dims lies in one part).
  const uint8_t* const* packed = nullptr;
  int64_t packed_bf16 = 0;
  // Fast numerics, packed rows with packed_bf16 a multiple of kSinkBf16LogitsAlign: each logit's bf16
  // dims as one vdpbf16ps chain against q rounded to bf16 (the reference kernel's bf16 q), its fp32
  // dims as before (sink_logit_bf16_model is the exact order; CPUs without AVX-512 BF16 run that model).
  bool bf16_logits = false;
  int64_t n = 0;
  const float* sink = nullptr;        // [heads]
  float scale = 1.0f;
  bool bf16_probs = false;            // reference numerics: exp(l − M) rounded to bf16 before P·V
  float* out = nullptr;               // [heads][dim]
  float* scratch = nullptr;           // sink_attention_scratch(*this) floats
};

// Floats of scratch: heads * (n + 1), and with bf16_logits the bf16 copy of q's bf16 dims.
inline int64_t sink_attention_scratch(const SinkAttention& a) {
  return a.heads * (a.n + 1) + (a.bf16_logits ? (a.heads * a.packed_bf16 + 1) / 2 : 0);
}

// One unscaled bf16_logits logit: 16 lanes as a zmm holds them; over the bf16 dims in steps of 32, lane
// l adds the products of dims 32s+2l+1 then 32s+2l (vdpbf16ps: bf16 subnormals read as zero, every
// step rounded once and flushed to zero); over the fp32 dims in steps of 16 a fused multiply-add per
// lane; the lanes summed as a tree (l + l+8, + l+4, + l+2, + l+1), then the dims past the last step.
float sink_logit_bf16_model(const uint16_t* qb, const float* q, const uint8_t* row, int64_t bf16_dims, int64_t dim);

inline constexpr int64_t kSinkPackedAlign = 16;
inline constexpr int64_t kSinkBf16LogitsAlign = 32;  // bf16 dims per vdpbf16ps step

// Dim i of a packed row with bf16_dims leading bf16 values.
inline float packed_row_value(const uint8_t* row, int64_t bf16_dims, int64_t i) {
  if (i < bf16_dims) {
    uint16_t b;
    std::memcpy(&b, row + 2 * i, 2);
    return core::bf16_to_float(b);
  }
  float f;
  std::memcpy(&f, row + 2 * bf16_dims + 4 * (i - bf16_dims), 4);
  return f;
}

void sink_attention(const SinkAttention& a);
void sink_attention_scalar(const SinkAttention& a);

}  // namespace dsinfer::kernels
