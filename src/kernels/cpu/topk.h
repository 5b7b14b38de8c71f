// Top-k selection with a total order: larger score first, equal scores toward the lower index
// (model-v4.md §2.14 item 6; also used for MoE routing). NaN ranks below every number.
#pragma once

#include <cstdint>
#include <vector>

namespace dsinfer::kernels {

// Writes the min(k, n) selected indices to out, sorted ascending by index (a canonical order, so
// what is built from the selection does not depend on how the selection was found). `scratch` is
// resized as needed and may be reused between calls to avoid allocation. Returns the count.
int64_t topk_indices(const float* scores, int64_t n, int64_t k, int32_t* out, std::vector<int32_t>& scratch);

// Oracle: full sort by (score desc, index asc).
int64_t topk_indices_scalar(const float* scores, int64_t n, int64_t k, int32_t* out);

}  // namespace dsinfer::kernels
