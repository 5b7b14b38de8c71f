// The n-gram hash of V4.1's Engram layers (model-v41.md §2.15, Appendix A): for every Engram layer
// its bucket primes, table offsets and hash multipliers, and the table row ids of a position from its
// compressed-token history. Row ids only; the table lookup and the gated update belong to the forward.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsinfer::model::deepseek_v41 {

struct EngramLayerHash {
  int64_t layer = 0;                  // backbone layer id
  std::vector<int64_t> primes;        // per column c = i * n_heads + h (n-gram i = 0..N-2)
  std::vector<int64_t> offsets;       // first table row of column c
  std::vector<uint64_t> multipliers;  // m_j, j = 0..N-1 (odd, x * m_j < 2^63 for every compressed id x)
};

class EngramHash {
 public:
  // From the config (which validated the primes against engram_num_embeddings); pad_id is the
  // compressed id of engram_pad_token_id (token_map[pad]).
  EngramHash(const EngramConfig& engram, int64_t pad_id);

  int64_t columns() const { return columns_; }
  int64_t max_ngram() const { return n_; }
  int64_t pad_id() const { return pad_id_; }
  const std::vector<EngramLayerHash>& layers() const { return layers_; }

  // Row ids [columns()] of Engram layer k for a position whose compressed-id history is
  // history[j] = cid[p - j], j = 0..N-1 (pad_id() where p - j < 0). Ids must be < compressed vocab.
  void rows(int64_t k, const int64_t* history, int64_t* out) const;

 private:
  int64_t n_ = 0;
  int64_t heads_ = 0;
  int64_t columns_ = 0;
  int64_t compressed_vocab_ = 0;
  int64_t pad_id_ = 0;
  std::vector<EngramLayerHash> layers_;
};

// m_{L,j} = 2 v_j + 1 with v = default_rng(10007 L).integers(0, ((2^63 - 1) div C) div 2, size=N) (A.2).
std::vector<uint64_t> engram_multipliers(int64_t layer_id, int64_t compressed_vocab_size, int64_t max_ngram);

}  // namespace dsinfer::model::deepseek_v41
