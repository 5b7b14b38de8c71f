// The token-mask cache's check (mask_cache_test.cpp, grammar_accepts' "compare" lines): seeded random
// walks through a grammar where, at every step, the mask of a matcher using the grammar's shared
// MaskCache must equal bit for bit the mask of a matcher over the same rules without it (the full trie
// walk), with rollbacks of 1-3 tokens mixed in.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_matcher.h"

namespace dsinfer::grammar::testing {

// The same rules without the shared cache: every mask walked in full.
inline std::shared_ptr<const Grammar> without_mask_cache(const Grammar& g) {
  Grammar plain = g;
  plain.mask_cache = nullptr;
  return std::make_shared<const Grammar>(std::move(plain));
}

// Empty when every step's masks agreed; else what differed. `steps`: the masks compared (out). Once the
// grammar is complete, end of text is picked one time in `eos_one_in`.
inline std::string compare_mask_walks(const std::shared_ptr<const Grammar>& g,
                                      const std::shared_ptr<const Vocabulary>& vocab, uint32_t seed, int walks,
                                      int max_steps, int* steps = nullptr, uint32_t eos_one_in = 8) {
  auto plain = without_mask_cache(*g);
  std::mt19937 rng(seed);
  TokenMask a((vocab->size() + 31) / 32), b(a.size());
  int compared = 0;
  for (int walk = 0; walk < walks; ++walk) {
    TokenMatcher cached(g, vocab), full(plain, vocab);
    for (int step = 0; step < max_steps && !cached.terminated(); ++step) {
      cached.fill_mask(a);
      full.fill_mask(b);
      ++compared;
      if (a != b) {
        for (int32_t id = 0; id < vocab->size(); ++id) {
          if (mask_allows(a, id) != mask_allows(b, id)) {
            return "walk " + std::to_string(walk) + " step " + std::to_string(step) + " (" +
                   std::to_string(full.tokens_accepted()) + " tokens in): token " + std::to_string(id) + " '" +
                   vocab->bytes_of(id) + "' is " + (mask_allows(a, id) ? "allowed" : "refused") +
                   " by the cached mask, " + (mask_allows(b, id) ? "allowed" : "refused") + " by the full walk";
          }
        }
      }
      if (cached.tokens_accepted() > 0 && rng() % 6 == 0) {
        const int32_t n = std::min<int32_t>(cached.tokens_accepted(), 1 + static_cast<int32_t>(rng() % 3));
        cached.rollback(n);
        full.rollback(n);
        continue;
      }
      // Half the time a one-byte token (structure: quotes, commas, brackets), so walks leave strings.
      std::vector<int32_t> allowed, short_ones;
      for (int32_t id = 0; id < vocab->size(); ++id) {
        if (!mask_allows(a, id)) continue;
        allowed.push_back(id);
        if (vocab->bytes_of(id).size() == 1) short_ones.push_back(id);
      }
      const auto& from = !short_ones.empty() && rng() % 2 == 0 ? short_ones : allowed;
      int32_t pick = from[std::uniform_int_distribution<size_t>(0, from.size() - 1)(rng)];
      if (cached.is_complete() && rng() % eos_one_in == 0) pick = vocab->eos_ids().front();
      const bool ok_a = cached.accept_token(pick), ok_b = full.accept_token(pick);
      if (!ok_a || !ok_b) {
        return "walk " + std::to_string(walk) + " step " + std::to_string(step) + ": masked token " +
               std::to_string(pick) + " '" + vocab->bytes_of(pick) + "' was refused by the " +
               (ok_a ? "full" : ok_b ? "cached" : "cached and the full") + " matcher";
      }
    }
  }
  if (steps != nullptr) *steps = compared;
  return "";
}

}  // namespace dsinfer::grammar::testing
