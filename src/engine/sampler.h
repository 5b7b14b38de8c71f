// Next-token sampling: greedy, temperature, top-k, top-p, min-p, driven by counter-based uniforms so a
// draw depends only on (seed, stream key, position, purpose). Also the lossless acceptance rule for
// speculative decoding (rejection sampling against the draft distribution).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/philox.h"

namespace dsinfer::engine {

// What a uniform is used for; part of the random counter so the streams never overlap.
enum class DrawPurpose : uint32_t { kSample = 0, kDraft = 1, kAccept = 2, kResidual = 3 };

// The random stream of one request: key derived from the seed and an optional request-supplied key, so
// identical requests draw identical numbers whatever batch or schedule they ran in.
class TokenStream {
 public:
  TokenStream(uint64_t seed, uint64_t request_key);
  double uniform(int64_t position, DrawPurpose purpose, uint32_t lane = 0) const {
    return philox_.uniform(static_cast<uint64_t>(position), static_cast<uint32_t>(purpose), lane);
  }

 private:
  Philox philox_;
};

struct TokenProb {
  int32_t token;
  float prob;
};

// A filtered, normalised next-token distribution: the tokens with non-zero probability in canonical
// order (by descending probability, ties to the lower id; or by id when nothing was filtered).
struct Distribution {
  std::vector<TokenProb> items;
  bool greedy = false;  // a single token with probability 1 (temperature 0)
  bool by_id = false;   // items[i].token == i for the whole vocabulary (nothing filtered)
  double prob_of(int32_t token) const;
};

bool is_greedy(const SamplingParams& p);

// Checks ranges; returns an empty string when valid, else a message naming the bad field.
std::string validate_sampling(const SamplingParams& p);

// Applies p's logit_bias and penalties to one logit row in place. `context` is every token before the
// row's position (prompt first); tokens from prompt_len on are the output.
void adjust_logits(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> context,
                   int64_t prompt_len);

// Sets the logit of every token whose bit is clear in `mask` (bit t of mask[t / 32]) to -inf.
void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask);

// Index of the largest logit, ties to the lowest id.
int32_t argmax(std::span<const float> logits);

Distribution make_distribution(std::span<const float> logits, const SamplingParams& p);

// Inverse-CDF draw with one uniform u in [0, 1).
int32_t sample_from(const Distribution& d, double u);

// Draws the token for `position` (the position the token will occupy) from logits.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, const TokenStream& stream,
                     int64_t position);

// The logprob of `token` and the k most likely tokens of one (adjusted, masked) logit row; see
// TokenLogprobs. Computed in double from the row alone, so it is batch invariant.
TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t k);

// Speculative verification of one request. target_logits has drafts.size()+1 rows: row i is the
// target's distribution for the position of drafts[i] (the last row is the bonus position). With
// draft distributions (same rows as drafts) the rule is rejection sampling; draft_dists may be empty
// when the drafts were chosen greedily (the draft distribution is then a point mass): then every token
// is sample_token's draw at its position, the draft kept while they agree (the same law as rejection
// sampling against a point mass), so a position's token does not depend on the steps' alignment.
struct Verification {
  std::vector<int32_t> tokens;  // accepted drafts followed by one corrected or bonus token
  int32_t accepted = 0;         // how many drafts were accepted
};
Verification verify_drafts(std::span<const float> target_logits, int32_t vocab, std::span<const int32_t> drafts,
                           std::span<const Distribution> draft_dists, const SamplingParams& p,
                           const TokenStream& stream, int64_t first_position);

}  // namespace dsinfer::engine
