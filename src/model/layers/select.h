// The MoE expert selection without hash layers, shared by V4 and V4.1 (model-v4.md §2.11,
// model-v41.md §2.11): the bias only chooses, it never weights,
//   biased[e] = score[e] + bias[e],   chosen = the K largest biased scores,
// in the total order of kernels/cpu/topk.h (larger first, equal toward the lower index, NaN below
// every number). V4 keeps the chosen experts by index (its canonical order), V4.1 by rank, which its
// route weights' sum follows (the reference's torch.topk order); T is the scalar of the model's glue.
// V4's hash layers choose from the token instead and stay in V4.
#pragma once

#include <cstdint>

namespace dsinfer::model::layers {

enum class SelectOrder {
  kByIndex,  // ascending expert index (V4)
  kByRank,   // largest biased score first (V4.1)
};

// biased: E T of scratch. Writes min(K, E) experts to chosen and returns that count.
template <typename T, typename Index>
int64_t select_experts(const T* scores, const float* bias, int64_t E, int64_t K, SelectOrder order, T* biased,
                       Index* chosen);

}  // namespace dsinfer::model::layers
