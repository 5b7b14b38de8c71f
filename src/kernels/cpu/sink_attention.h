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
  int64_t n = 0;
  const float* sink = nullptr;        // [heads]
  float scale = 1.0f;
  bool bf16_probs = false;            // reference numerics: exp(l − M) rounded to bf16 before P·V
  float* out = nullptr;               // [heads][dim]
  float* scratch = nullptr;           // heads * (n + 1) floats
};

inline constexpr int64_t kSinkPackedAlign = 16;

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
