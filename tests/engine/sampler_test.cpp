#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <span>
#include <vector>

namespace dsinfer::engine {
namespace {

// Filters of make_distribution, written the obvious way: full sort, then min-p, top-k, top-p.
std::map<int32_t, double> brute_force(const std::vector<float>& logits, const SamplingParams& p) {
  const int n = static_cast<int>(logits.size());
  std::vector<double> w(n);
  const double top = *std::max_element(logits.begin(), logits.end());
  for (int i = 0; i < n; ++i) w[i] = std::exp((logits[i] - top) / p.temperature);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return w[a] > w[b]; });
  std::vector<int> kept;
  for (int i : order) {
    if (w[i] >= p.min_p) kept.push_back(i);
  }
  if (p.top_k > 0 && static_cast<int>(kept.size()) > p.top_k) kept.resize(p.top_k);
  if (p.top_p < 1) {
    double total = 0;
    for (int i : kept) total += w[i];
    double cum = 0;
    size_t k = 0;
    while (k < kept.size()) {
      cum += w[kept[k++]];
      if (cum >= p.top_p * total) break;
    }
    kept.resize(k);
  }
  double sum = 0;
  for (int i : kept) sum += w[i];
  std::map<int32_t, double> out;
  for (int i : kept) out[i] = w[i] / sum;
  return out;
}

std::vector<float> random_logits(int n, uint64_t seed, float scale) {
  Philox rng(seed);
  std::vector<float> l(n);
  for (int i = 0; i < n; ++i) l[i] = static_cast<float>((rng.uniform(i, 9, 0) - 0.5) * 2 * scale);
  return l;
}

// Pearson chi-square of observed counts against expected probabilities.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs, int64_t n) {
  double x = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * static_cast<double>(n);
    if (e > 0) x += (counts[i] - e) * (counts[i] - e) / e;
  }
  return x;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  SamplingParams p;
  p.temperature = 0;
  TokenStream s(1, 0);
  EXPECT_EQ(sample_token(l, p, s, 0), 1);
  EXPECT_EQ(argmax(l), 1);
  Distribution d = make_distribution(l, p);
  ASSERT_EQ(d.items.size(), 1u);
  EXPECT_TRUE(d.greedy);
}

TEST(Sampler, FiltersMatchBruteForce) {
  const std::vector<SamplingParams> cases = [] {
    std::vector<SamplingParams> v;
    for (float t : {0.5f, 1.0f, 1.7f}) {
      for (int k : {0, 1, 7, 300}) {
        for (float tp : {1.0f, 0.9f, 0.3f}) {
          for (float mp : {0.0f, 0.05f}) {
            SamplingParams p;
            p.temperature = t;
            p.top_k = k;
            p.top_p = tp;
            p.min_p = mp;
            v.push_back(p);
          }
        }
      }
    }
    return v;
  }();
  for (int vocab : {5, 200, 5000}) {
    const std::vector<float> logits = random_logits(vocab, vocab, 6.0f);
    for (const SamplingParams& p : cases) {
      const auto want = brute_force(logits, p);
      const Distribution got = make_distribution(logits, p);
      ASSERT_EQ(got.items.size(), want.size()) << "vocab " << vocab << " T " << p.temperature << " k " << p.top_k
                                               << " p " << p.top_p << " min_p " << p.min_p;
      for (const TokenProb& t : got.items) {
        ASSERT_TRUE(want.count(t.token)) << t.token;
        EXPECT_NEAR(t.prob, want.at(t.token), 1e-5);
        EXPECT_NEAR(got.prob_of(t.token), want.at(t.token), 1e-5);
      }
    }
  }
}

TEST(Sampler, DrawsFollowTheDistribution) {
  const std::vector<float> logits = random_logits(12, 3, 2.0f);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 9;
  const Distribution d = make_distribution(logits, p);
  std::vector<double> probs(12, 0.0);
  for (const TokenProb& t : d.items) probs[t.token] = t.prob;
  TokenStream s(99, 0);
  const int64_t n = 40000;
  std::vector<int64_t> counts(12, 0);
  for (int64_t i = 0; i < n; ++i) ++counts[sample_token(logits, p, s, i)];
  for (int t = 0; t < 12; ++t) {
    if (probs[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " was filtered out";
    }
  }
  EXPECT_LT(chi_square(counts, probs, n), 27.9);  // df <= 8, p = 0.0005
}

TEST(Sampler, StreamsDependOnSeedKeyAndPositionOnly) {
  TokenStream a(5, 0), b(5, 0), c(5, 1), d(6, 0);
  EXPECT_EQ(a.uniform(10, DrawPurpose::kSample), b.uniform(10, DrawPurpose::kSample));
  EXPECT_NE(a.uniform(10, DrawPurpose::kSample), c.uniform(10, DrawPurpose::kSample));
  EXPECT_NE(a.uniform(10, DrawPurpose::kSample), d.uniform(10, DrawPurpose::kSample));
  EXPECT_NE(a.uniform(10, DrawPurpose::kSample), a.uniform(10, DrawPurpose::kAccept));
}

TEST(Sampler, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(validate_sampling(p).find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1;
  EXPECT_NE(validate_sampling(p).find("temperature"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(validate_sampling(p).find("top_k"), std::string::npos);
  p = {};
  p.min_p = 2;
  EXPECT_NE(validate_sampling(p).find("min_p"), std::string::npos);
  EXPECT_EQ(validate_sampling(SamplingParams{}), "");
}

TEST(Verify, GreedyAcceptsTheMatchingPrefix) {
  // Three rows over a vocab of 4: argmaxes 2, 0, 3 (and a bonus row with argmax 1).
  std::vector<float> rows = {0, 0, 5, 0, /**/ 5, 0, 0, 0, /**/ 0, 0, 0, 5, /**/ 0, 5, 0, 0};
  SamplingParams p;
  p.temperature = 0;
  TokenStream s(0, 0);
  std::vector<int32_t> drafts = {2, 0, 1};
  Verification v = verify_drafts(rows, 4, drafts, {}, p, s, 10);
  EXPECT_EQ(v.accepted, 2);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 0, 3}));
  drafts = {2, 0, 3};
  v = verify_drafts(rows, 4, drafts, {}, p, s, 10);
  EXPECT_EQ(v.accepted, 3);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2, 0, 3, 1}));
  drafts = {1, 0, 3};
  v = verify_drafts(rows, 4, drafts, {}, p, s, 10);
  EXPECT_EQ(v.accepted, 0);
  EXPECT_EQ(v.tokens, (std::vector<int32_t>{2}));
}

// Rejection sampling is lossless: drafts drawn from q, verified against p, give tokens distributed as p.
void check_lossless(bool greedy_draft) {
  const int V = 6;
  const std::vector<float> target0 = random_logits(V, 11, 1.5f), target1 = random_logits(V, 12, 1.5f);
  const std::vector<float> draft0 = random_logits(V, 13, 1.5f), draft1 = random_logits(V, 14, 1.5f);
  SamplingParams p;
  p.temperature = 1.0f;
  const Distribution P0 = make_distribution(target0, p), P1 = make_distribution(target1, p);
  const Distribution Q0 = make_distribution(draft0, p), Q1 = make_distribution(draft1, p);
  std::vector<float> rows(target0);
  rows.insert(rows.end(), target1.begin(), target1.end());
  rows.insert(rows.end(), target1.begin(), target1.end());  // bonus row
  const int64_t n = 30000;
  std::vector<int64_t> first(V, 0), second(V, 0), first_if_q(V, 0);
  int64_t reached_second = 0, accepted = 0;
  for (int64_t trial = 0; trial < n; ++trial) {
    TokenStream s(static_cast<uint64_t>(trial), 77);
    TokenStream draw(static_cast<uint64_t>(trial), 78);
    std::vector<int32_t> drafts;
    std::vector<Distribution> qs;
    if (greedy_draft) {
      drafts = {argmax(draft0), argmax(draft1)};
    } else {
      drafts = {sample_from(Q0, draw.uniform(0, DrawPurpose::kDraft)), sample_from(Q1, draw.uniform(1, DrawPurpose::kDraft))};
      qs = {Q0, Q1};
    }
    ++first_if_q[drafts[0]];
    Verification v = verify_drafts(rows, V, drafts, qs, p, s, 100);
    accepted += v.accepted;
    ++first[v.tokens[0]];
    if (v.tokens.size() >= 2) {
      ++second[v.tokens[1]];
      ++reached_second;
    }
  }
  std::vector<double> p0(V), p1(V), q0(V);
  for (int t = 0; t < V; ++t) {
    p0[t] = P0.prob_of(t);
    p1[t] = P1.prob_of(t);
    q0[t] = greedy_draft ? (t == argmax(draft0)) : Q0.prob_of(t);
  }
  EXPECT_LT(chi_square(first, p0, n), 22.1) << "first token not distributed as the target";  // df 5, p 0.0005
  EXPECT_LT(chi_square(second, p1, reached_second), 22.1) << "second token not distributed as the target";
  EXPECT_GT(accepted, 0);
  // The test can tell distributions apart: the draft's own distribution is far from the target's.
  if (!greedy_draft) {
    EXPECT_GT(chi_square(first_if_q, p0, n), 100.0);
  }
}

// With point-mass drafts (what the engine's MTP drafting gives) every verified token is the plain
// sampler's draw at its position, whichever step it fell in: so a stream resumed at any position (a
// failover, its steps aligned differently) continues with exactly the uninterrupted run's tokens.
TEST(Verify, PointMassDraftsGiveThePlainSamplersTokenAtEachPosition) {
  const int V = 6;
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  int64_t accepted = 0, rejected = 0;
  for (uint64_t trial = 0; trial < 400; ++trial) {
    std::vector<float> rows;
    for (int r = 0; r < 3; ++r) {
      const std::vector<float> row = random_logits(V, 1000 + trial * 3 + static_cast<uint64_t>(r), 1.5f);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    auto row = [&](int r) { return std::span<const float>(rows.data() + r * V, V); };
    const TokenStream s(trial, 5);
    const int64_t first = static_cast<int64_t>(trial % 7) + 40;
    // Drafts: the most likely tokens, so both outcomes are common.
    const std::vector<int32_t> drafts = {argmax(row(0)), argmax(row(1))};
    const Verification v = verify_drafts(rows, V, drafts, {}, p, s, first);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.accepted) + 1);
    for (size_t i = 0; i < v.tokens.size(); ++i)
      EXPECT_EQ(v.tokens[i], sample_token(row(static_cast<int>(i)), p, s, first + static_cast<int64_t>(i)))
          << "trial " << trial << " token " << i;
    accepted += v.accepted;
    rejected += v.accepted < 2 ? 1 : 0;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(Verify, RejectionSamplingIsLosslessWithSampledDrafts) { check_lossless(false); }
TEST(Verify, RejectionSamplingIsLosslessWithGreedyDrafts) { check_lossless(true); }

}  // namespace
}  // namespace dsinfer::engine
