// The lightning indexer of CSA layers (model-v4.md §2.7.2): builds its own compressed keys, scores
// every visible compressed entry for each query row and keeps the top index_topk (ties toward the lower
// index, §2.14 item 6). The selection addresses the main compressed cache.
#pragma once

#include <cstdint>

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// The products of the attention input a and the query latent qr, computed by the caller with the
// layer's others: qi = wq_b · qr [N][Hi·Di] (modified in place), wts = weights_proj · a [N][Hi]
// (modified in place), u / sc = the indexer compressor's wkv / wgate · a. For each row:
// sel[row·topk ...] receives count[row] selected entry indices in ascending order.
struct IndexerInputs {
  float* qi = nullptr;
  float* wts = nullptr;
  const float* u = nullptr;
  const float* sc = nullptr;
};
void indexer_forward(const IndexerWeights& w, const LayerShape& ls, StepContext& ctx, const IndexerInputs& in,
                     int32_t* sel, int32_t* count);

}  // namespace dsinfer::model::deepseek_v4
