// Orthonormal Walsh–Hadamard transform in natural (Sylvester) order: x ← H·x / sqrt(n) with
// H[i][j] = (−1)^popcount(i & j) (model-v4.md §2.7.2, §2.14 item 7). n must be a power of two.
// Scalar butterflies: the indexer applies it to 128-vectors, a negligible cost next to its products.
#pragma once

#include <cstdint>

namespace dsinfer::kernels {

void hadamard_transform(float* x, int64_t n);

}  // namespace dsinfer::kernels
