#include "model/layer_schedule.h"

#include <algorithm>

#include "core/error.h"
#include "model/engram_constants.h"

namespace dsinfer::model {
namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The largest entry of `ids` that is <= layer, else -1.
int64_t latest_at_or_before(const std::vector<int64_t>& ids, int64_t layer) {
  int64_t best = -1;
  for (int64_t id : ids) {
    if (id <= layer) best = std::max(best, id);
  }
  return best;
}

}  // namespace

std::vector<LayerRoles> compute_layer_roles(const ModelConfig& c) {
  std::vector<LayerRoles> roles(c.compress_ratios.size());
  for (int64_t L = 0; L < static_cast<int64_t>(roles.size()); ++L) {
    LayerRoles& r = roles[static_cast<size_t>(L)];
    r.ratio = c.compress_ratios[static_cast<size_t>(L)];
    const bool backbone = L < c.num_hidden_layers;
    if (c.arch == Architecture::kDeepseekV4) {
      // Every compressed V4 layer compresses for itself; CSA layers (ratio 4) select for themselves,
      // HCA layers attend to every visible entry.
      r.owns_compressor = r.ratio > 0;
      r.kv_source = r.ratio > 0 ? L : -1;
      r.owns_indexer = r.ratio == 4;
      r.index_source = r.ratio == 4 ? L : -1;
    } else if (backbone) {
      r.owns_compressor = contains(c.kv_source_layer_ids, L);
      r.owns_indexer = contains(c.index_source_layer_ids, L);
      if (r.ratio > 0) {
        r.kv_source = latest_at_or_before(c.kv_source_layer_ids, L);
        r.index_source = latest_at_or_before(c.index_source_layer_ids, L);
      }
      r.candidate_source = c.candidate_source_layer_id >= 0 && L == c.candidate_source_layer_id;
      r.candidate_user = c.candidate_source_layer_id >= 0 && r.owns_indexer && L > c.candidate_source_layer_id;
      if (c.engram) r.engram = c.engram->index_of(L);
    }
    if (backbone && c.dspark) r.dspark_target = contains(c.dspark->target_layer_ids, L);
  }
  return roles;
}

void check_v41_schedule(const ModelConfig& c, const std::string& source) {
  auto need = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) core::fail("config ", source, ": field '", field, "' ", why);
  };
  const int64_t n = c.num_hidden_layers;
  auto ratio = [&](int64_t L) { return c.compress_ratios[static_cast<size_t>(L)]; };
  // Layer lists: backbone layers, strictly increasing (the sharing rules read "the most recent").
  auto layer_list = [&](const std::vector<int64_t>& ids, const char* field) {
    for (size_t i = 0; i < ids.size(); ++i) {
      need(ids[i] >= 0 && ids[i] < n, field,
           core::str_cat("entry ", ids[i], " is not a backbone layer in [0, ", n, ")"));
      need(i == 0 || ids[i] > ids[i - 1], field, core::str_cat("must be strictly increasing, got ", ids[i - (i > 0)],
                                                               " before ", ids[i]));
    }
  };
  layer_list(c.kv_source_layer_ids, "kv_source_layer_ids");
  layer_list(c.index_source_layer_ids, "index_source_layer_ids");

  for (int64_t L = 0; L < c.num_layers_total(); ++L) {
    const int64_t r = ratio(L);
    const std::string at = core::str_cat("compress_ratios[", L, "]");
    need(r == 0 || r == 1 || r == 2, at,
         core::str_cat("must be 0, 1 or 2 in V4.1 (model-v41.md §2.6 defines compressors of ratio 1 and 2), got ", r));
    if (L >= n) continue;
    const bool kv = contains(c.kv_source_layer_ids, L), ix = contains(c.index_source_layer_ids, L);
    if (r == 0) {  // rule 4
      need(!kv, "kv_source_layer_ids",
           core::str_cat("lists layer ", L, ", a sliding-window-only layer (ratio 0): a kv source compresses (§1.3 rule 4)"));
      need(!ix, "index_source_layer_ids",
           core::str_cat("lists layer ", L, ", a sliding-window-only layer (ratio 0) (§1.3 rule 4)"));
      continue;
    }
    if (kv) {  // rule 1
      need(ix, "index_source_layer_ids",
           core::str_cat("must list every kv source, but not layer ", L,
                         " (its indexer produces the index keys, §1.3 rule 1)"));
    }
    const int64_t src = latest_at_or_before(c.kv_source_layer_ids, L);  // rule 2
    need(src >= 0, "kv_source_layer_ids",
         core::str_cat("has no kv source at or before layer ", L, " (ratio ", r,
                       "): a compressed layer reads the compressed KV of the most recent one (§1.3 rule 2)"));
    need(ratio(src) == r, "kv_source_layer_ids",
         core::str_cat("makes layer ", L, " (ratio ", r, ") read the compressed KV of layer ", src, " (ratio ", ratio(src),
                       "): a change of ratio must start with a new kv source (§1.3 rule 2)"));
    const int64_t isrc = latest_at_or_before(c.index_source_layer_ids, L);  // rule 3
    need(isrc >= src && ratio(isrc) == r, "index_source_layer_ids",
         core::str_cat("makes layer ", L, " (ratio ", r, ") use the selection of layer ", isrc,
                       ", which must be at or after its kv source ", src, " with the same ratio (§1.3 rule 3)"));
  }

  // Rule 5 and 6: two-level selection.
  if (c.candidate_source_layer_id >= 0) {
    const int64_t lc = c.candidate_source_layer_id;
    need(lc < n && contains(c.index_source_layer_ids, lc), "candidate_source_layer_id",
         core::str_cat("(", lc, ") must be an index source (§1.3 rule 5)"));
    need(c.candidate_topk_blocks >= 1, "candidate_topk_blocks",
         core::str_cat("must be positive when a candidate source is set, got ", c.candidate_topk_blocks));
    need(c.candidate_block_size >= 1, "candidate_block_size",
         core::str_cat("must be positive when a candidate source is set, got ", c.candidate_block_size));
    for (int64_t L : c.index_source_layer_ids) {
      need(L <= lc || ratio(L) == ratio(lc), "index_source_layer_ids",
           core::str_cat("has layer ", L, " (ratio ", ratio(L), ") after the candidate source ", lc, " (ratio ",
                         ratio(lc), "): candidate users must have its ratio (§1.3 rule 5)"));
    }
    // Both factors are bounded by validate(): no overflow.
    need((c.candidate_topk_blocks - 1) * c.candidate_block_size + 1 >= c.index_topk, "candidate_topk_blocks",
         core::str_cat("(", c.candidate_topk_blocks, ") x candidate_block_size (", c.candidate_block_size,
                       ") leaves fewer than index_topk (", c.index_topk,
                       ") candidate positions: (blocks - 1) * block_size + 1 >= index_topk (§1.3 rule 6)"));
  } else {
    need(c.candidate_source_layer_id == -1, "candidate_source_layer_id",
         core::str_cat("must be a layer id or -1 (no two-level selection), got ", c.candidate_source_layer_id));
  }

  // Rule 7: every FP8 block and FP4 block of V4.1 is 32 (16 for the compressed KV) wide.
  auto multiple = [&](int64_t v, int64_t m, const char* field) {
    need(v % m == 0, field, core::str_cat("(", v, ") must be a multiple of ", m, " (§1.3 rule 7)"));
  };
  multiple(c.head_dim, 32, "head_dim");
  multiple(c.index_head_dim, 32, "index_head_dim");
  multiple(c.hidden_size, 32, "hidden_size");

  if (c.engram) {
    const EngramConfig& e = *c.engram;
    multiple(e.head_dim, 32, "engram_head_dim");
    need(e.num_embeddings.size() == e.layer_ids.size(), "engram_num_embeddings",
         core::str_cat("has ", e.num_embeddings.size(), " entries, engram_layer_ids ", e.layer_ids.size()));
    for (size_t i = 0; i < e.layer_ids.size(); ++i) {
      need(e.layer_ids[i] >= 0 && e.layer_ids[i] < n, "engram_layer_ids",
           core::str_cat("entry ", e.layer_ids[i], " is not a backbone layer in [0, ", n, ")"));
      for (size_t j = 0; j < i; ++j) {
        need(e.layer_ids[j] != e.layer_ids[i], "engram_layer_ids", core::str_cat("lists layer ", e.layer_ids[i], " twice"));
      }
    }
    const auto primes = engram_primes(e);  // rule 8
    for (size_t k = 0; k < primes.size(); ++k) {
      int64_t sum = 0;
      for (int64_t p : primes[k]) sum += p;
      need(e.num_embeddings[k] == sum, "engram_num_embeddings",
           core::str_cat("[", k, "] (", e.num_embeddings[k], ") must be the sum of Engram layer ", e.layer_ids[k],
                         "'s ", primes[k].size(), " bucket primes from engram_vocab_size (", e.vocab_size, "): ", sum,
                         " (§1.3 rule 8, Appendix A)"));
    }
  }
  if (c.dspark) {
    const auto& t = c.dspark->target_layer_ids;
    for (size_t i = 0; i < t.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        need(t[j] != t[i], "dspark_target_layer_ids", core::str_cat("lists layer ", t[i], " twice"));
      }
    }
  }
}

}  // namespace dsinfer::model
