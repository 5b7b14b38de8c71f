// One attention sub-layer of DeepSeek-V4 (model-v4.md §2.4–§2.9): low-rank queries with per-head RMS
// normalisation, one shared KV vector per token (K = V) written to the window ring, the compressor
// (CSA/HCA) and indexer (CSA), the sink-softmax core over window ∪ compressed entries, inverse RoPE of
// the outputs and the grouped low-rank output projection.
#pragma once

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// a: [N][d] (attn_norm output) → out: [N][d].
void attention_forward(const AttentionWeights& w, const LayerShape& ls, StepContext& ctx, const float* a, float* out);

}  // namespace dsinfer::model::deepseek_v4
