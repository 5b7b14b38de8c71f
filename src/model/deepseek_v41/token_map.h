// The Engram compressed-token map (model-v41.md §5): token id -> compressed id. Read from the
// engram_token_map.json sidecar next to the checkpoint when there is one (synthetic checkpoints; it
// takes precedence), else derived from the checkpoint's tokenizer.json as the reference does at load
// time (engram_normalize.h). The released V4.1 tokenizer gives 99,092 ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::model::deepseek_v41 {

struct EngramTokenMap {
  std::vector<int64_t> map;        // map[token id]; tokens >= map.size() have no entry
  int64_t compressed_vocab = 0;    // number of distinct ids (= engram_compressed_vocab_size)
  int64_t compressed(int64_t token) const;  // fails for a token without an entry
};

// Checks: compressed_vocab_size equals the config's, ids are exactly 0..C-1 in order of first
// appearance (as the derivation numbers them), at most vocab_size entries, the pad token has one.
// The sidecar if `model_dir` has one, else the map derived from `model_dir`/tokenizer.json; either way
// its id count must be the config's engram_compressed_vocab_size (every hash multiplier depends on it).
EngramTokenMap load_engram_token_map(const std::string& model_dir, const ModelConfig& config);
EngramTokenMap parse_engram_token_map(const std::string& text, const std::string& source, const ModelConfig& config);

// §5: for every id t < tok.vocab_size(), key = the decode of [t] (special tokens kept); if that holds
// U+FFFD (a partial UTF-8 byte token), the raw vocabulary string of t instead, else
// engram_normalize(text), or text when that is empty; ids numbered by first appearance of the key.
EngramTokenMap derive_engram_token_map(const tokenizer::Tokenizer& tok);

// The map as the sidecar's JSON ({"compressed_vocab_size": N, "token_map": [...]}).
std::string engram_token_map_json(const EngramTokenMap& map);

}  // namespace dsinfer::model::deepseek_v41
