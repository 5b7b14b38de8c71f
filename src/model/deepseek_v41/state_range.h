// What a V4.1 sequence keeps for a range of positions (model-v41.md §3.1), as plain arrays: the unit
// the engine adapter shares, caches and stores as a block. Sequence keeps every position (no ring),
// so the state of positions [0, n) is exactly the concatenation of the ranges that cover them, and a
// sequence rebuilt by appending ranges continues bit for bit as the one that computed them.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace dsinfer::model::deepseek_v41 {

struct StateRange {
  // A kv-source layer's share: the compressor inputs a sequence keeps of the range's positions and the
  // compressed entries (KV and index keys) those positions complete. begin is a multiple of the
  // ratio; end may cut a ratio-2 group only where the sequence ends (its inputs are kept, its entry
  // is not made yet).
  struct Source {
    int64_t layer = 0, ratio = 0;
    // Ratio 2: compressor wkv and wgate rows of the even positions [(n + 1) / 2, head_dim] (a group's
    // first row: what an open group, after a rollback to any odd length, needs); ratio 1: none.
    std::vector<float> u, g;
    std::vector<float> ckv;   // [n / ratio, head_dim]
    std::vector<float> ik;    // [n / ratio, index_head_dim]
  };
  int64_t begin = 0, end = 0;
  std::vector<int32_t> ids;                // token ids
  std::vector<int64_t> cid;                // Engram compressed ids (empty without Engram layers)
  std::vector<std::vector<float>> windows;  // per backbone layer in order: window KV [n, head_dim]
  std::vector<Source> sources;             // per kv-source layer, in layer order
  std::vector<std::vector<float>> taps;    // per DSpark target layer, in order: [n, hidden_size]

  int64_t size() const { return end - begin; }
  int64_t bytes() const;  // memory of the arrays
};

// Throws unless r has exactly the arrays and sizes a sequence of this config keeps for its positions
// (with_engram: compressed ids present; a sequence has them when the config has Engram layers).
void check_state_range(const ModelConfig& c, const StateRange& r);

// The bytes a range of n positions holds for this config (what bytes() of a well-formed one returns).
int64_t state_range_bytes(const ModelConfig& c, int64_t n);

}  // namespace dsinfer::model::deepseek_v41
