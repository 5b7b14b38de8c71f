// Speculative decoding through the engine on the synthetic model: greedy output equals
// non-speculative decoding exactly; sampled output has the target distribution.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

RequestSpec spec_of(std::vector<int32_t> prompt, int max_tokens, float temperature, uint64_t seed) {
  RequestSpec s;
  s.prompt_ids = std::move(prompt);
  s.max_tokens = max_tokens;
  s.sampling.temperature = temperature;
  s.sampling.seed = seed;
  s.ignore_eos = true;
  return s;
}

TEST(Speculation, GreedyOutputEqualsNonSpeculativeDecoding) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(11);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 60);
    for (auto& t : prompt) t = 2 + static_cast<int32_t>(rng() % (cfg.vocab - 2));
    specs.push_back(spec_of(prompt, 10 + static_cast<int>(rng() % 50), 0.0f, 0));
  }
  std::vector<Outcome> want;
  for (const auto& s : specs) want.push_back(expected_outcome(reference, s, cfg.eos));
  for (int k = 1; k <= cfg.max_draft; ++k) {
    for (bool overlap : {false, true}) {
      EngineOptions o;
      o.speculation = true;
      o.draft_tokens = k;
      o.overlap_scheduling = overlap;
      o.max_batch_tokens = 40;
      o.max_running = 6;
      o.kv_budget_bytes = k == 3 ? 14000 : 1 << 24;  // one run under memory pressure
      o.swa_replay = false;
      auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
      auto out = run_all(*engine, specs);
      ASSERT_EQ(out.size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(out[i].tokens, want[i].tokens) << "k " << k << " overlap " << overlap << " request " << i;
      }
      const EngineMetrics m = engine->metrics();
      EXPECT_GT(m.draft_tokens_total, 0);
      EXPECT_GT(m.accepted_draft_tokens_total, 0) << "the drafter is a perturbed copy of the model";
      EXPECT_LE(m.accepted_draft_tokens_total, m.draft_tokens_total);
      EXPECT_LT(m.steps_total, m.generated_tokens_total) << "speculation should save steps";
    }
  }
}

TEST(Speculation, RejectsTheBadDraftsOfAPoorDrafter) {
  ToyConfig cfg;
  cfg.drafter_noise = 3.0f;  // mostly wrong drafts: every rejection path is exercised
  ToyModel reference(cfg);
  std::vector<RequestSpec> specs = {spec_of({5, 6, 7, 8, 9}, 60, 0.0f, 0)};
  EngineOptions o;
  o.speculation = true;
  o.draft_tokens = 4;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
  auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens, expected_outcome(reference, specs[0], cfg.eos).tokens);
  const EngineMetrics m = engine->metrics();
  EXPECT_LT(m.accepted_draft_tokens_total * 2, m.draft_tokens_total);
}

// Exact distribution of generated tokens 2 and 3 (marginals over earlier tokens) from the model's
// logits, against many speculative runs with different seeds.
TEST(Speculation, SampledOutputHasTheTargetDistribution) {
  ToyConfig cfg;
  cfg.vocab = 12;
  cfg.logit_scale = 2.0f;
  cfg.drafter_noise = 0.4f;
  ToyModel reference(cfg);
  const std::vector<int32_t> prompt = {3, 7, 4, 9, 5};
  SamplingParams sp;
  sp.temperature = 1.0f;
  auto dist = [&](std::vector<int32_t> tokens) { return make_distribution(reference.reference_logits(tokens), sp); };
  const int V = cfg.vocab;
  std::vector<double> p1(V, 0), p2(V, 0), p3(V, 0);
  const Distribution d1 = dist(prompt);
  for (const TokenProb& a : d1.items) {
    p1[a.token] += a.prob;
    auto pa = prompt;
    pa.push_back(a.token);
    for (const TokenProb& b : dist(pa).items) {
      p2[b.token] += a.prob * b.prob;
      auto pb = pa;
      pb.push_back(b.token);
      for (const TokenProb& c : dist(pb).items) p3[c.token] += a.prob * b.prob * c.prob;
    }
  }
  const int n = 3000;
  std::vector<RequestSpec> specs;
  for (int i = 0; i < n; ++i) specs.push_back(spec_of(prompt, 3, 1.0f, 1000 + i));
  EngineOptions o;
  o.speculation = true;
  o.draft_tokens = 2;
  o.max_running = 64;
  o.max_batch_tokens = 512;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
  auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  std::vector<int64_t> c1(V, 0), c2(V, 0), c3(V, 0);
  for (const auto& r : out) {
    ASSERT_EQ(r.tokens.size(), 3u) << "status " << static_cast<int>(r.status) << " finish "
                                   << static_cast<int>(r.finish) << " error '" << r.error << "'";
    ++c1[r.tokens[0]];
    ++c2[r.tokens[1]];
    ++c3[r.tokens[2]];
  }
  auto chi2 = [&](const std::vector<int64_t>& c, const std::vector<double>& p) {
    double x = 0;
    for (int t = 0; t < V; ++t) {
      const double e = p[t] * n;
      if (e > 0) x += (c[t] - e) * (c[t] - e) / e;
    }
    return x;
  };
  // df = 11: the 0.0005 quantile is 34.5. Fixed seeds, so the outcome is deterministic.
  EXPECT_LT(chi2(c1, p1), 34.5);
  EXPECT_LT(chi2(c2, p2), 34.5);
  EXPECT_LT(chi2(c3, p3), 34.5);
  const EngineMetrics m = engine->metrics();
  EXPECT_GT(m.accepted_draft_tokens_total, 0);
  // The test can fail: the drafter's own greedy choice is far from the target distribution.
  std::vector<double> point(V, 0);
  point[argmax(reference.reference_logits(prompt))] = 1.0;
  std::vector<double> mixed(V);
  for (int t = 0; t < V; ++t) mixed[t] = 0.5 * p1[t] + 0.5 * point[t];
  EXPECT_GT(chi2(c1, mixed), 100.0);
}

}  // namespace
}  // namespace dsinfer::engine::testing
