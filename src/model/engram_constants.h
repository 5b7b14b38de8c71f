// The hash constants of V4.1's Engram layers (model-v41.md §2.15, Appendix A): the bucket primes and
// table offsets of every Engram layer, which the config check needs (engram_num_embeddings must be the
// sum of a layer's primes) and the hashing uses.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsinfer::model {

// primes[k][c]: the table size of column c = i * n_heads + h (n-gram i = 0..N-2, head h) of Engram
// layer k. Consecutive primes >= engram.vocab_size handed out in (layer, n-gram, head) order (A.1).
std::vector<std::vector<int64_t>> engram_primes(const EngramConfig& engram);

// offsets[k][c] = sum of primes[k][c'] for c' < c: column c owns table rows [offset, offset + prime).
std::vector<std::vector<int64_t>> engram_offsets(const std::vector<std::vector<int64_t>>& primes);

}  // namespace dsinfer::model
