// Lightning-indexer scores (model-v4.md §2.7.2 step 5): for each key t,
//   I_t = Σ_h w_h · ReLU(q_h · K_t),
// heads summed in ascending order. Each key's score is computed alone (vectorised along the head
// dimension only), so it does not depend on which other keys share the call.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

// q: [heads][dim], w: [heads], keys: [n][dim] → scores[n]
void index_scores(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys, int64_t n,
                  float* scores);
void index_scores_scalar(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys, int64_t n,
                         float* scores);

}  // namespace dsinfer::kernels
