#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "kernels/cpu/vec.h"

namespace dsinfer::engine {
namespace {

// SplitMix64 finaliser: mixes the seed and the request key into one Philox key.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr float kGreedyTemperature = 1e-5f;

}  // namespace

TokenStream::TokenStream(uint64_t seed, uint64_t request_key) : philox_(mix64(seed ^ mix64(request_key))) {}

double Distribution::prob_of(int32_t token) const {
  if (by_id) {
    return token >= 0 && static_cast<size_t>(token) < items.size() ? items[token].prob : 0.0;
  }
  for (const TokenProb& t : items) {
    if (t.token == token) return t.prob;
  }
  return 0.0;
}

bool is_greedy(const SamplingParams& p) { return p.temperature < kGreedyTemperature; }

std::string validate_sampling(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0) return "temperature must be a finite number >= 0";
  if (!std::isfinite(p.top_p) || p.top_p <= 0 || p.top_p > 1) return "top_p must be in (0, 1]";
  if (p.top_k < 0) return "top_k must be >= 0 (0 = off)";
  if (!std::isfinite(p.min_p) || p.min_p < 0 || p.min_p > 1) return "min_p must be in [0, 1]";
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2)) return "presence_penalty must be in [-2, 2]";
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2)) return "frequency_penalty must be in [-2, 2]";
  if (!(p.repetition_penalty > 0 && p.repetition_penalty <= 10)) return "repetition_penalty must be in (0, 10]";
  if (p.top_logprobs < -1 || p.top_logprobs > kMaxTopLogprobs)
    return core::str_cat("top_logprobs must be in [0, ", kMaxTopLogprobs, "] (or -1 = off)");
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0) return core::str_cat("logit_bias: token ", token, " is negative");
    if (!(bias >= -100 && bias <= 100)) return core::str_cat("logit_bias of token ", token, " must be in [-100, 100]");
  }
  return "";
}

void adjust_logits(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> context,
                   int64_t prompt_len) {
  const auto vocab = static_cast<int64_t>(logits.size());
  for (const auto& [token, bias] : p.logit_bias) {
    DSINFER_CHECK(token >= 0 && token < vocab, "logit_bias: token ", token, " is outside the vocabulary");
    logits[token] += bias;
  }
  const bool repetition = p.repetition_penalty != 1.0f;
  if (!repetition && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) return;
  // (token, in output) pairs sorted: each distinct token's count is a run, in id order.
  std::vector<std::pair<int32_t, bool>> seen;
  seen.reserve(context.size());
  for (size_t i = 0; i < context.size(); ++i) {
    const bool output = static_cast<int64_t>(i) >= prompt_len;
    if (output || repetition) seen.push_back({context[i], output});
  }
  std::sort(seen.begin(), seen.end());
  for (size_t i = 0; i < seen.size();) {
    const int32_t token = seen[i].first;
    int64_t count = 0;
    size_t j = i;
    for (; j < seen.size() && seen[j].first == token; ++j) count += seen[j].second;
    i = j;
    if (token < 0 || token >= vocab) continue;
    float& x = logits[token];
    if (repetition) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    if (count > 0) x -= p.frequency_penalty * static_cast<float>(count) + p.presence_penalty;
  }
}

void apply_token_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  for (size_t t = 0; t < logits.size(); ++t) {
    if (!((mask[t >> 5] >> (t & 31)) & 1)) logits[t] = -std::numeric_limits<float>::infinity();
  }
}

int32_t argmax(std::span<const float> logits) {
  DSINFER_CHECK(!logits.empty(), "argmax over an empty logit row");
  return static_cast<int32_t>(kernels::argmax_first(logits.data(), static_cast<int64_t>(logits.size())));
}

Distribution make_distribution(std::span<const float> logits, const SamplingParams& p) {
  Distribution d;
  const int64_t vocab = static_cast<int64_t>(logits.size());
  DSINFER_CHECK(vocab > 0, "sampling from an empty logit row");
  if (is_greedy(p)) {
    d.greedy = true;
    d.items.push_back({argmax(logits), 1.0f});
    return d;
  }
  const float inv_t = 1.0f / p.temperature;
  const float top = logits[argmax(logits)];
  // Unnormalised weights relative to the best token (which has weight exactly 1).
  std::vector<float> w(vocab);
  for (int64_t i = 0; i < vocab; ++i) w[i] = std::exp((logits[i] - top) * inv_t);

  const bool use_k = p.top_k > 0 && p.top_k < vocab;
  const bool use_p = p.top_p < 1.0f;
  const bool use_min_p = p.min_p > 0.0f;
  if (!use_k && !use_p && !use_min_p) {
    double sum = 0;
    for (float x : w) sum += x;
    d.by_id = true;
    d.items.resize(vocab);
    for (int64_t i = 0; i < vocab; ++i) d.items[i] = {static_cast<int32_t>(i), static_cast<float>(w[i] / sum)};
    return d;
  }

  // Filters in a fixed order: min-p (relative to the best token), then top-k, then top-p over the
  // renormalised survivors. Candidates end sorted by descending weight, ties to the lower id.
  std::vector<int32_t> cand;
  cand.reserve(use_min_p || use_k ? 1024 : vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    if (!use_min_p || w[i] >= p.min_p) cand.push_back(static_cast<int32_t>(i));
  }
  auto before = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  if (use_k && static_cast<int64_t>(cand.size()) > p.top_k) {
    std::nth_element(cand.begin(), cand.begin() + (p.top_k - 1), cand.end(), before);
    cand.resize(p.top_k);
  }
  size_t keep = cand.size();
  if (use_p) {
    double total = 0;
    for (int32_t t : cand) total += w[t];
    const double target = static_cast<double>(p.top_p) * total;
    // Sort only as much of the head as the nucleus needs: grow the sorted prefix until it covers top_p.
    size_t sorted = std::min<size_t>(64, cand.size());
    while (true) {
      std::partial_sort(cand.begin(), cand.begin() + sorted, cand.end(), before);
      double cum = 0;
      size_t i = 0;
      for (; i < sorted; ++i) {
        cum += w[cand[i]];
        if (cum >= target) break;
      }
      if (i < sorted) {
        keep = i + 1;
        break;
      }
      if (sorted == cand.size()) {
        keep = cand.size();
        break;
      }
      sorted = std::min(cand.size(), sorted * 4);
    }
    cand.resize(keep);
  } else {
    std::sort(cand.begin(), cand.end(), before);
  }
  double sum = 0;
  for (int32_t t : cand) sum += w[t];
  d.items.reserve(cand.size());
  for (int32_t t : cand) d.items.push_back({t, static_cast<float>(w[t] / sum)});
  return d;
}

int32_t sample_from(const Distribution& d, double u) {
  DSINFER_CHECK(!d.items.empty(), "sampling from an empty distribution");
  double cum = 0;
  for (const TokenProb& t : d.items) {
    cum += t.prob;
    if (u < cum) return t.token;
  }
  // Rounding left the total a hair below 1: the draw belongs to the last token with non-zero mass.
  for (auto it = d.items.rbegin(); it != d.items.rend(); ++it) {
    if (it->prob > 0) return it->token;
  }
  return d.items.back().token;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, const TokenStream& stream,
                     int64_t position) {
  if (is_greedy(p)) return argmax(logits);
  return sample_from(make_distribution(logits, p), stream.uniform(position, DrawPurpose::kSample));
}

TokenLogprobs token_logprobs(std::span<const float> logits, int32_t token, int32_t k) {
  DSINFER_CHECK(!logits.empty(), "logprobs of an empty logit row");
  DSINFER_CHECK(token >= 0 && static_cast<size_t>(token) < logits.size(), "logprobs: token ", token,
                " is outside the vocabulary");
  const double top = logits[argmax(logits)];
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - top);
  const double log_z = top + std::log(sum);
  TokenLogprobs out;
  out.logprob = static_cast<float>(logits[token] - log_z);
  if (k <= 0) return out;
  std::vector<int32_t> ids;
  ids.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != -std::numeric_limits<float>::infinity()) ids.push_back(static_cast<int32_t>(i));
  }
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const size_t n = std::min(ids.size(), static_cast<size_t>(k));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), before);
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i) out.top.push_back({ids[i], static_cast<float>(logits[ids[i]] - log_z)});
  return out;
}

Verification verify_drafts(std::span<const float> target_logits, int32_t vocab, std::span<const int32_t> drafts,
                           std::span<const Distribution> draft_dists, const SamplingParams& p,
                           const TokenStream& stream, int64_t first_position) {
  const size_t k = drafts.size();
  DSINFER_CHECK(target_logits.size() == (k + 1) * static_cast<size_t>(vocab), "verify: expected ", k + 1,
                " logit rows of ", vocab, ", got ", target_logits.size(), " values");
  DSINFER_CHECK(draft_dists.empty() || draft_dists.size() == k, "verify: draft distributions do not match drafts");
  auto row = [&](size_t i) { return target_logits.subspan(i * vocab, vocab); };
  Verification v;
  if (is_greedy(p)) {
    for (size_t i = 0; i < k; ++i) {
      const int32_t t = argmax(row(i));
      v.tokens.push_back(t);
      if (t != drafts[i]) return v;
      ++v.accepted;
    }
    v.tokens.push_back(argmax(row(k)));
    return v;
  }
  if (draft_dists.empty()) {
    // Point-mass drafts: the token at each position is the plain sampler's draw there, kept as the draft
    // when they agree. Same law as rejection sampling (accepted with probability p(x); otherwise drawn
    // from p without x, the residual), but a position's token depends on (seed, position) only, not on
    // which verify step it fell in: a stream resumed elsewhere (a failover) continues exactly.
    for (size_t i = 0; i < k; ++i) {
      const int32_t t = sample_token(row(i), p, stream, first_position + static_cast<int64_t>(i));
      v.tokens.push_back(t);
      if (t != drafts[i]) return v;
      ++v.accepted;
    }
    v.tokens.push_back(sample_token(row(k), p, stream, first_position + static_cast<int64_t>(k)));
    return v;
  }
  std::vector<float> q_dense;
  for (size_t i = 0; i < k; ++i) {
    const int64_t pos = first_position + static_cast<int64_t>(i);
    const Distribution target = make_distribution(row(i), p);
    const int32_t x = drafts[i];
    const double q = draft_dists[i].prob_of(x);
    const double px = target.prob_of(x);
    if (stream.uniform(pos, DrawPurpose::kAccept) * q < px) {
      v.tokens.push_back(x);
      ++v.accepted;
      continue;
    }
    // Rejected: draw from the residual max(0, p - q), renormalised.
    q_dense.assign(vocab, 0.0f);
    for (const TokenProb& t : draft_dists[i].items) q_dense[t.token] = t.prob;
    Distribution residual;
    double mass = 0;
    for (const TokenProb& t : target.items) {
      const double r = std::max(0.0, static_cast<double>(t.prob) - q_dense[t.token]);
      if (r > 0) {
        residual.items.push_back({t.token, static_cast<float>(r)});
        mass += r;
      }
    }
    const double u = stream.uniform(pos, DrawPurpose::kResidual);
    if (mass <= 0) {
      v.tokens.push_back(sample_from(target, u));
    } else {
      for (TokenProb& t : residual.items) t.prob = static_cast<float>(t.prob / mass);
      v.tokens.push_back(sample_from(residual, u));
    }
    return v;
  }
  v.tokens.push_back(sample_token(row(k), p, stream, first_position + static_cast<int64_t>(k)));
  return v;
}

}  // namespace dsinfer::engine
