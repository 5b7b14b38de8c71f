// The lightning indexer of CSA layers (model-v4.md §2.7.2): builds its own compressed keys, scores
// every visible compressed entry for each query row and keeps the top index_topk (ties toward the lower
// index, §2.14 item 6). The selection addresses the main compressed cache.
#pragma once

#include <cstdint>

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// a: [N][d] attention input, qr: [N][q_lora] query latent. For each row: sel[row·topk ...] holds
// count[row] selected entry indices in ascending order.
void indexer_forward(const IndexerWeights& w, const LayerShape& ls, StepContext& ctx, const float* a, const float* qr,
                     int32_t* sel, int32_t* count);

}  // namespace dsinfer::model::deepseek_v4
