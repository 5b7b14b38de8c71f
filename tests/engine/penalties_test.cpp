// Logit bias and the presence / frequency / repetition penalties: the sampler's row adjustment against
// hand-computed values, and whole requests through the engine (batched, chunked, preempted, speculative)
// against a reference loop that applies the penalties its own, obvious way.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

TEST(Penalties, AdjustRowByHand) {
  SamplingParams p;
  p.logit_bias = {{0, 5.0f}, {4, -100.0f}};
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.repetition_penalty = 2.0f;
  std::vector<float> row = {1.0f, -2.0f, 4.0f, 0.5f, 3.0f, -1.0f};
  // Prompt: tokens 1, 2; output: 2, 2, 3.
  const std::vector<int32_t> context = {1, 2, 2, 2, 3};
  adjust_logits(row, p, context, 2);
  EXPECT_FLOAT_EQ(row[0], 6.0f);                          // bias only
  EXPECT_FLOAT_EQ(row[1], -4.0f);                         // in the prompt: repetition (negative: x2)
  EXPECT_FLOAT_EQ(row[2], 4.0f / 2 - 0.25f * 2 - 0.5f);   // repetition, then 2 in the output
  EXPECT_FLOAT_EQ(row[3], 0.5f / 2 - 0.25f - 0.5f);       // once in the output
  EXPECT_FLOAT_EQ(row[4], -97.0f);                        // bias, never seen
  EXPECT_FLOAT_EQ(row[5], -1.0f);                         // untouched
}

TEST(Penalties, Validation) {
  SamplingParams p;
  p.presence_penalty = 2.5f;
  EXPECT_NE(validate_sampling(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -3;
  EXPECT_NE(validate_sampling(p).find("frequency_penalty"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(validate_sampling(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.logit_bias = {{3, 101.0f}};
  EXPECT_NE(validate_sampling(p).find("logit_bias"), std::string::npos);
  p = {};
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(validate_sampling(p).find("logit_bias"), std::string::npos);
}

// The obvious implementation: count every token, then adjust each vocabulary entry in turn.
void reference_adjust(std::vector<float>& row, const SamplingParams& p, const std::vector<int32_t>& tokens,
                      size_t prompt_len) {
  for (const auto& [t, b] : p.logit_bias) row[t] += b;
  std::map<int32_t, int> in_output;
  std::map<int32_t, bool> anywhere;
  for (size_t i = 0; i < tokens.size(); ++i) {
    anywhere[tokens[i]] = true;
    if (i >= prompt_len) ++in_output[tokens[i]];
  }
  for (int32_t t = 0; t < static_cast<int32_t>(row.size()); ++t) {
    if (anywhere.count(t)) row[t] = row[t] > 0 ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
    if (in_output.count(t)) row[t] -= p.frequency_penalty * static_cast<float>(in_output[t]) + p.presence_penalty;
  }
}

Outcome reference_outcome(ToyModel& model, const RequestSpec& spec) {
  Outcome o;
  std::vector<int32_t> tokens = spec.prompt_ids;
  TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
  for (int32_t i = 0; i < spec.max_tokens; ++i) {
    std::vector<float> logits = model.reference_logits(tokens);
    reference_adjust(logits, spec.sampling, tokens, spec.prompt_ids.size());
    const int32_t t = sample_token(logits, spec.sampling, stream, static_cast<int64_t>(tokens.size()));
    tokens.push_back(t);
    o.tokens.push_back(t);
  }
  o.finish = FinishReason::kLength;
  return o;
}

TEST(Penalties, EngineMatchesTheReferenceInEverySchedule) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(5);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 10; ++i) {
    std::vector<int32_t> prompt(1 + rng() % 50);
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % cfg.vocab);
    RequestSpec s = fixed_length_greedy(prompt, 20 + static_cast<int>(rng() % 30));
    if (i % 2) {
      s.sampling.temperature = 0.9f;
      s.sampling.seed = 40 + i;
    }
    s.sampling.presence_penalty = 0.3f * static_cast<float>(i % 3);
    s.sampling.frequency_penalty = 0.2f * static_cast<float>(i % 4) - 0.2f;
    s.sampling.repetition_penalty = i % 5 == 0 ? 1.0f : 1.3f;
    s.sampling.logit_bias = {{static_cast<int32_t>(rng() % cfg.vocab), 2.5f}, {cfg.eos, -100.0f}};
    specs.push_back(s);
  }
  std::vector<Outcome> want;
  for (const auto& s : specs) want.push_back(reference_outcome(reference, s));
  // The penalties must change the output, or this test proves nothing.
  int changed = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    RequestSpec plain = specs[i];
    plain.sampling.logit_bias.clear();
    plain.sampling.presence_penalty = plain.sampling.frequency_penalty = 0;
    plain.sampling.repetition_penalty = 1;
    changed += expected_outcome(reference, plain, cfg.eos).tokens != want[i].tokens;
  }
  EXPECT_GE(changed, 7);

  struct Setup {
    int32_t batch_tokens, running;
    bool overlap, speculation;
    int64_t budget;
  };
  for (const Setup& st : std::vector<Setup>{{1000, 16, true, false, 1 << 24},
                                            {7, 3, false, false, 1 << 24},
                                            {33, 8, true, false, 9000},
                                            {40, 6, false, true, 1 << 24},
                                            {40, 6, true, true, 1 << 24}}) {
    EngineOptions o;
    o.max_batch_tokens = st.batch_tokens;
    o.max_running = st.running;
    o.overlap_scheduling = st.overlap;
    o.speculation = st.speculation;
    o.draft_tokens = 3;
    o.kv_budget_bytes = st.budget;
    o.swa_replay = false;
    auto model = std::make_shared<ToyModel>(cfg);
    std::optional<ForwardGate> gate;
    if (st.budget < 20000) gate.emplace(*model);  // queue everything first: preemption is certain
    auto engine = make_engine(model, o);
    auto out = run_all(*engine, specs, {}, 0, [&] {
      if (gate) gate->release();
    });
    ASSERT_EQ(out.size(), specs.size());
    const std::string where = "batch_tokens " + std::to_string(st.batch_tokens) + " speculation " +
                              std::to_string(st.speculation) + " overlap " + std::to_string(st.overlap);
    for (size_t i = 0; i < specs.size(); ++i) {
      // Speculative sampling is lossless in distribution, not token for token: compare greedy ones.
      if (st.speculation && specs[i].sampling.temperature > 0) continue;
      EXPECT_EQ(out[i].tokens, want[i].tokens) << where << " request " << i;
    }
    if (st.budget < 20000) {
      EXPECT_GT(engine->metrics().preempted_total, 0) << where;
    }
  }
}

TEST(Penalties, BiasOutsideTheVocabularyIsRejected) {
  ToyConfig cfg;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), EngineOptions{});
  RequestSpec s = fixed_length_greedy({2, 3}, 2);
  s.sampling.logit_bias = {{cfg.vocab, 1.0f}};
  const SubmitResult r = engine->submit(s, [](const TokenEvent&) {});
  EXPECT_EQ(r.status, SubmitStatus::kInvalid);
  EXPECT_NE(r.message.find("logit_bias"), std::string::npos);
}

}  // namespace
}  // namespace dsinfer::engine::testing
