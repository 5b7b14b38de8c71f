// Logprobs: the sampler's per-row computation against a hand-checked log-softmax, and whole requests
// through the engine (batched, chunked, speculative, biased, constrained by sampling knobs) against an
// independent log-softmax of the toy model's reference logits for the tokens the engine produced.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

// log-softmax in long double, written out the obvious way (no max shift needed for these rows).
std::vector<double> reference_log_softmax(const std::vector<float>& row) {
  long double z = 0;
  for (float x : row) z += std::exp(static_cast<long double>(x));
  std::vector<double> out;
  for (float x : row) out.push_back(static_cast<double>(static_cast<long double>(x) - std::log(z)));
  return out;
}

TEST(Logprobs, RowByHand) {
  // Ties at 2.0 (ids 1 and 3) go to the lower id; -inf (masked) is never listed.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f, -inf, 3.0f};
  const TokenLogprobs lp = token_logprobs(row, 3, 4);
  const double log_z = std::log(std::exp(0.5) + 2 * std::exp(2.0) + std::exp(-1.0) + std::exp(3.0));
  EXPECT_NEAR(lp.logprob, 2.0 - log_z, 1e-6);
  ASSERT_EQ(lp.top.size(), 4u);
  const int32_t ids[] = {5, 1, 3, 0};
  const double vals[] = {3.0, 2.0, 2.0, 0.5};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(lp.top[i].token, ids[i]) << i;
    EXPECT_NEAR(lp.top[i].logprob, vals[i] - log_z, 1e-6) << i;
  }
  // More alternatives asked for than finite tokens: only the finite ones.
  EXPECT_EQ(token_logprobs(row, 5, 20).top.size(), 5u);
  EXPECT_TRUE(token_logprobs(row, 5, 0).top.empty());
  // Huge logits do not overflow (the shift by the maximum).
  std::vector<float> big = {1000.0f, 1000.0f};
  EXPECT_NEAR(token_logprobs(big, 0, 0).logprob, -std::log(2.0), 1e-6);
}

TEST(Logprobs, Validation) {
  SamplingParams p;
  EXPECT_EQ(validate_sampling(p), "");
  p.top_logprobs = 20;
  EXPECT_EQ(validate_sampling(p), "");
  p.top_logprobs = 21;
  EXPECT_NE(validate_sampling(p).find("top_logprobs"), std::string::npos);
  p.top_logprobs = -2;
  EXPECT_NE(validate_sampling(p).find("top_logprobs"), std::string::npos);
}

TEST(Logprobs, EngineMatchesAnIndependentLogSoftmaxInEverySchedule) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(11);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 8; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 40);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.vocab);
    RequestSpec s = fixed_length_greedy(prompt, 10 + static_cast<int>(rng() % 20));
    s.sampling.top_logprobs = i % 3 == 0 ? 0 : 5 + i;
    if (i % 2) {
      // Temperature and top-k/top-p change what is drawn, never the reported numbers.
      s.sampling.temperature = 0.8f;
      s.sampling.top_k = 10;
      s.sampling.top_p = 0.9f;
      s.sampling.seed = 100 + i;
    }
    if (i % 4 == 1) s.sampling.logit_bias = {{static_cast<int32_t>(rng() % cfg.vocab), 3.0f}};
    specs.push_back(s);
  }
  struct Setup {
    int32_t batch_tokens, running;
    bool overlap, speculation;
  };
  for (const Setup& st : std::vector<Setup>{{1000, 16, true, false}, {7, 3, false, false}, {40, 6, true, true}}) {
    EngineOptions o;
    o.max_batch_tokens = st.batch_tokens;
    o.max_running = st.running;
    o.overlap_scheduling = st.overlap;
    o.speculation = st.speculation;
    o.draft_tokens = 3;
    auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
    auto out = run_all(*engine, specs);
    ASSERT_EQ(out.size(), specs.size());
    const std::string where = "batch_tokens " + std::to_string(st.batch_tokens) + " speculation " +
                              std::to_string(st.speculation);
    for (size_t i = 0; i < specs.size(); ++i) {
      const RequestSpec& s = specs[i];
      ASSERT_EQ(out[i].tokens.size(), static_cast<size_t>(s.max_tokens)) << where << " request " << i;
      ASSERT_EQ(out[i].logprobs.size(), out[i].tokens.size()) << where << " request " << i;
      std::vector<int32_t> context = s.prompt_ids;
      for (size_t j = 0; j < out[i].tokens.size(); ++j) {
        std::vector<float> row = reference.reference_logits(context);
        for (const auto& [t, b] : s.sampling.logit_bias) row[t] += b;
        const std::vector<double> want = reference_log_softmax(row);
        const int32_t token = out[i].tokens[j];
        const TokenLogprobs& got = out[i].logprobs[j];
        const std::string at = where + " request " + std::to_string(i) + " token " + std::to_string(j);
        EXPECT_NEAR(got.logprob, want[token], 1e-4) << at;
        // The expected alternatives: every id by descending logprob, ties to the lower id.
        std::vector<int32_t> order(cfg.vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        ASSERT_EQ(got.top.size(), static_cast<size_t>(s.sampling.top_logprobs)) << at;
        for (size_t k = 0; k < got.top.size(); ++k) {
          EXPECT_EQ(got.top[k].token, order[k]) << at << " alternative " << k;
          EXPECT_NEAR(got.top[k].logprob, want[order[k]], 1e-4) << at << " alternative " << k;
        }
        // Greedy picks the argmax: its logprob is the best one.
        if (s.sampling.temperature == 0) {
          EXPECT_EQ(token, order[0]) << at;
        }
        context.push_back(token);
      }
    }
  }
}

TEST(Logprobs, OffByDefault) {
  ToyConfig cfg;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), EngineOptions{});
  auto out = run_all(*engine, {fixed_length_greedy({2, 3, 4}, 5)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens.size(), 5u);
  EXPECT_TRUE(out[0].logprobs.empty());
}

}  // namespace
}  // namespace dsinfer::engine::testing
