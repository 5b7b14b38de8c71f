// Attention core with a learned sink (model-v4.md §2.9): for every head h and the attended rows k_j
// (each row is both key and value, MQA with K = V),
//   l_j = scale · (q_h · k_j),  M = max_j l_j,
//   o_h = Σ_j exp(l_j − M) · k_j / (Σ_j exp(l_j − M) + exp(sink_h − M)).
// Rows are given as pointers so callers can attend a window slice and selected compressed entries
// without copying. Every head's result depends only on its query, the rows (in the given order) and
// the sink: batch and thread-count invariant.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

struct SinkAttention {
  const float* q = nullptr;           // [heads][dim]
  int64_t heads = 0;
  int64_t dim = 0;
  const float* const* rows = nullptr; // n pointers to `dim` floats
  int64_t n = 0;
  const float* sink = nullptr;        // [heads]
  float scale = 1.0f;
  bool bf16_probs = false;            // reference numerics: exp(l − M) rounded to bf16 before P·V
  float* out = nullptr;               // [heads][dim]
  float* scratch = nullptr;           // heads * (n + 1) floats
};

void sink_attention(const SinkAttention& a);
void sink_attention_scalar(const SinkAttention& a);

}  // namespace dsinfer::kernels
