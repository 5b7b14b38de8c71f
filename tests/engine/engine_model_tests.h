// The engine tests every tiny DeepSeek checkpoint passes, written once as a type-parameterised suite
// (EngineModel) and instantiated by each model's test file with that model's fixture: EngineV4 in
// engine_v4_test.cpp, EngineV41 in engine_v41_test.cpp. The sizes differ per checkpoint (vocabulary,
// window, how much work fits a test's time), so each fixture states them in EngineModelCases; the
// checks are the same. A fixture provides, all static:
//   runner()                    the engine's ModelRunner over its checkpoint;
//   reference(spec)             the plain decode loop over the model library (what a request must give);
//   prompt(rng, n)              n random tokens of its vocabulary;
//   expect_model_layout(info)   the checks of ModelInfo that only hold for that model;
//   cases()                     its EngineModelCases.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine_test_util.h"

namespace dsinfer::engine::testing {

struct EngineModelCases {
  const char* name;  // in what the tests print
  struct Layout {
    int64_t vocab_size, window;
    int32_t max_draft_tokens;
    std::string identity_prefix;
  } layout;
  // Four requests: greedy, sampled, greedy with a long prompt, sampled; prefill chunked by `budget`.
  struct Concurrent {
    uint32_t seed;
    int32_t long_prompt;
    std::vector<int32_t> tokens;
    int32_t budget;
  } concurrent;
  // `requests` random requests (prompt 1..max_prompt, min_tokens..2*min_tokens-1 tokens), alone and
  // mixed under each budget; overlap scheduling is off under `serial_budget`.
  struct Batch {
    uint32_t seed;
    int requests, max_prompt, min_tokens;
    std::vector<int32_t> budgets;
    int32_t serial_budget;
  } batch;
  // Greedy requests with the model's drafter at each of `draft_tokens`; request `repeat` again resumes
  // `repeat_cached` tokens from the cache.
  struct Speculation {
    uint32_t seed;
    std::vector<int32_t> prompts, tokens, draft_tokens;
    size_t repeat;
    int64_t repeat_cached;
  } speculation;
  // `requests` requests of `prompt` + `tokens` positions (the second sampled at `sampled_temperature`
  // where it is not 0) in a KV budget with room for `fitting` of them (`blocks` blocks each) and a block.
  struct Preemption {
    uint32_t seed;
    int requests, prompt, tokens;
    float sampled_temperature;
    int fitting, blocks;
    bool swa_replay;
  } preemption;
};

// Each spec run alone in an engine without a prefix cache: what a mixed batch must reproduce.
inline std::vector<Outcome> run_each_alone(const std::shared_ptr<ModelRunner>& runner,
                                           const std::vector<RequestSpec>& specs) {
  EngineOptions o;
  o.max_running = 1;
  o.prefix_cache = false;
  auto engine = make_engine(runner, o);
  std::vector<Outcome> alone;
  for (const auto& s : specs) {
    auto r = run_all(*engine, {s});
    EXPECT_EQ(r.size(), 1u);
    alone.push_back(r.empty() ? Outcome{} : r[0]);
  }
  return alone;
}

// The specs submitted in an order drawn from rng; the outcomes in spec order.
inline std::vector<Outcome> run_shuffled(Engine& engine, const std::vector<RequestSpec>& specs, std::mt19937& rng) {
  std::vector<size_t> order(specs.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return run_all(engine, specs, order);
}

template <class Model>
class EngineModel : public Model {};

TYPED_TEST_SUITE_P(EngineModel);

TYPED_TEST_P(EngineModel, ReportsTheModelLayout) {
  const auto& c = TypeParam::cases().layout;
  const auto runner = TypeParam::runner();
  const ModelInfo& i = runner->info();
  EXPECT_EQ(i.vocab_size, c.vocab_size);
  EXPECT_EQ(i.window, c.window);
  EXPECT_EQ(i.block_tokens, 128);
  EXPECT_GT(i.block_bytes, 0);
  EXPECT_GT(i.sequence_bytes, 0);
  EXPECT_EQ(i.max_draft_tokens, c.max_draft_tokens);
  EXPECT_EQ(i.identity.rfind(c.identity_prefix, 0), 0u) << i.identity;
  TypeParam::expect_model_layout(i);
  // A snapshot at a block boundary fits the bound the engine plans with.
  std::mt19937 rng(9);
  const std::vector<int32_t> tokens = TypeParam::prompt(rng, 128);
  auto seq = runner->new_sequence();
  std::vector<float> logits;
  ForwardItem item;
  item.seq = seq.get();
  item.tokens = tokens;
  item.logit_rows = 0;
  runner->forward({&item, 1}, logits);
  auto snap = runner->snapshot(*seq);
  EXPECT_EQ(snap->position(), 128);
  EXPECT_GT(snap->bytes(), 0);
  EXPECT_LE(snap->bytes(), i.snapshot_bytes);
  std::printf("tiny %s: block %lld B, sequence %lld B, snapshot bound %lld B, snapshot at 128: %lld B\n",
              TypeParam::cases().name, static_cast<long long>(i.block_bytes), static_cast<long long>(i.sequence_bytes),
              static_cast<long long>(i.snapshot_bytes), static_cast<long long>(snap->bytes()));
}

// Greedy and seeded sampled requests, prefill chunked by max_batch_tokens, give the plain loop's tokens.
TYPED_TEST_P(EngineModel, ConcurrentRequestsMatchThePlainLoop) {
  const auto& c = TypeParam::cases().concurrent;
  ASSERT_EQ(c.tokens.size(), 4u);
  std::mt19937 rng(c.seed);
  std::vector<RequestSpec> specs = {fixed_length_spec(TypeParam::prompt(rng, 5), c.tokens[0]),
                                    fixed_length_spec(TypeParam::prompt(rng, 140), c.tokens[1], 0.8f, 3),
                                    fixed_length_spec(TypeParam::prompt(rng, c.long_prompt), c.tokens[2]),
                                    fixed_length_spec(TypeParam::prompt(rng, 40), c.tokens[3], 1.0f, 4)};
  EngineOptions o;
  o.max_batch_tokens = c.budget;
  auto engine = make_engine(TypeParam::runner(), o);
  auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(out[i].finish, FinishReason::kLength) << out[i].error;
    EXPECT_EQ(out[i].tokens, TypeParam::reference(specs[i]).tokens) << "request " << i;
  }
}

// The same requests alone and in shuffled mixes with budgets that split prefills differently.
TYPED_TEST_P(EngineModel, OutputsDoNotDependOnTheBatch) {
  const auto& c = TypeParam::cases().batch;
  std::mt19937 rng(c.seed);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < c.requests; ++i) {
    specs.push_back(fixed_length_spec(TypeParam::prompt(rng, 1 + static_cast<int>(rng() % c.max_prompt)),
                                      c.min_tokens + static_cast<int>(rng() % c.min_tokens), i % 2 ? 0.9f : 0.0f,
                                      10 + i));
  }
  const std::vector<Outcome> alone = run_each_alone(TypeParam::runner(), specs);
  ASSERT_EQ(alone.size(), specs.size());
  for (int32_t budget : c.budgets) {
    EngineOptions o;
    o.max_batch_tokens = budget;
    o.overlap_scheduling = budget != c.serial_budget;
    auto engine = make_engine(TypeParam::runner(), o);
    auto out = run_shuffled(*engine, specs, rng);
    ASSERT_EQ(out.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(out[i].tokens, alone[i].tokens) << "budget " << budget << " request " << i;
    }
  }
}

// Speculation with the model's drafter changes no greedy output (sampled requests are lossless in
// distribution only: rejection sampling, tested on the toy model), also on a repeat resumed from the
// cache (the snapshot carries what the drafter reads).
TYPED_TEST_P(EngineModel, SpeculationIsLossless) {
  const auto& c = TypeParam::cases().speculation;
  ASSERT_EQ(c.prompts.size(), c.tokens.size());
  ASSERT_LT(c.repeat, c.prompts.size());
  std::mt19937 rng(c.seed);
  std::vector<RequestSpec> specs;
  for (size_t i = 0; i < c.prompts.size(); ++i) specs.push_back(fixed_length_spec(TypeParam::prompt(rng, c.prompts[i]), c.tokens[i]));
  std::vector<Outcome> want;
  for (const auto& s : specs) want.push_back(TypeParam::reference(s));
  for (int32_t k : c.draft_tokens) {
    EngineOptions o;
    o.speculation = true;
    o.draft_tokens = k;
    auto engine = make_engine(TypeParam::runner(), o);
    auto out = run_all(*engine, specs);
    ASSERT_EQ(out.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(out[i].finish, FinishReason::kLength) << out[i].error;
      EXPECT_EQ(out[i].tokens, want[i].tokens) << "k " << k << " request " << i;
    }
    const EngineMetrics m = engine->metrics();
    EXPECT_GT(m.draft_tokens_total, 0);
    EXPECT_LE(m.accepted_draft_tokens_total, m.draft_tokens_total);
    std::printf("%s k=%d: %lld of %lld drafts accepted\n", TypeParam::cases().name, k,
                static_cast<long long>(m.accepted_draft_tokens_total), static_cast<long long>(m.draft_tokens_total));
    auto again = run_all(*engine, {specs[c.repeat]});
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].cached, c.repeat_cached);
    EXPECT_EQ(again[0].tokens, want[c.repeat].tokens);
  }
}

TYPED_TEST_P(EngineModel, PreemptionUnderATightBudgetKeepsOutputs) {
  const auto& c = TypeParam::cases().preemption;
  std::mt19937 rng(c.seed);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < c.requests; ++i) {
    specs.push_back(fixed_length_spec(TypeParam::prompt(rng, c.prompt), c.tokens, i == 1 ? c.sampled_temperature : 0.0f, 5));
  }
  const ModelInfo& info = TypeParam::runner()->info();
  EngineOptions o;
  o.kv_budget_bytes = c.fitting * (info.sequence_bytes + c.blocks * info.block_bytes + info.snapshot_bytes) + info.block_bytes;
  o.swa_replay = c.swa_replay;
  auto engine = make_engine(TypeParam::runner(), o);
  auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(out[i].finish, FinishReason::kLength) << out[i].error;
    EXPECT_EQ(out[i].tokens, TypeParam::reference(specs[i]).tokens) << i;
  }
  EXPECT_GT(engine->metrics().preempted_total, 0);
}

REGISTER_TYPED_TEST_SUITE_P(EngineModel, ReportsTheModelLayout, ConcurrentRequestsMatchThePlainLoop,
                            OutputsDoNotDependOnTheBatch, SpeculationIsLossless, PreemptionUnderATightBudgetKeepsOutputs);

}  // namespace dsinfer::engine::testing
