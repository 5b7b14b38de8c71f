// The Engram compressed-token map (model-v41.md §5): token id -> compressed id. Read from the
// engram_token_map.json sidecar next to the checkpoint (synthetic checkpoints have one; it takes
// precedence over tokenizer.json). Deriving it from tokenizer.json needs Unicode normalisation and is
// not implemented yet: without a sidecar, loading fails with a message that says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace dsinfer::model::deepseek_v41 {

struct EngramTokenMap {
  std::vector<int64_t> map;        // map[token id]; tokens >= map.size() have no entry
  int64_t compressed_vocab = 0;    // number of distinct ids (= engram_compressed_vocab_size)
  int64_t compressed(int64_t token) const;  // fails for a token without an entry
};

// Checks: compressed_vocab_size equals the config's, ids are exactly 0..C-1 in order of first
// appearance (as the derivation numbers them), at most vocab_size entries, the pad token has one.
EngramTokenMap load_engram_token_map(const std::string& model_dir, const ModelConfig& config);
EngramTokenMap parse_engram_token_map(const std::string& text, const std::string& source, const ModelConfig& config);

}  // namespace dsinfer::model::deepseek_v41
