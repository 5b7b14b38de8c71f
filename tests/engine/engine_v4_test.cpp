// The engine over a tiny DeepSeek-V4 checkpoint (mkmodel, vocabulary cut to 4096): the shared suite
// (engine_model_tests.h: layout, outputs against a plain decode loop over model/deepseek_v4, batch
// invariance, speculation with the MTP block, preemption) and what is V4's own: the fast numerics,
// exact resume from the prefix cache, bounded replay within its tolerance, one runner under two engines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <thread>

#include <unistd.h>

#include "engine/deepseek_v4/v4_runner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_model_tests.h"
#include "engine_test_util.h"
#include "model/deepseek_v4/model.h"
#include "model/mkmodel.h"
#include "tiny_v4_checkpoint.h"

namespace dsinfer::engine::testing {
namespace {

namespace v4 = model::deepseek_v4;

class EngineV4 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    checkpoint_ = new TinyV4Checkpoint("dsinfer-engine-v4-test");
    runner_ = new std::shared_ptr<ModelRunner>(open_model(checkpoint_->dir()));
    plain_ = v4::Model::load(checkpoint_->dir()).release();
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete runner_;
    delete checkpoint_;
  }

  static std::shared_ptr<ModelRunner> runner() { return *runner_; }

  // The plain loop: prefill in chunks of `chunk`, then one token per forward; tokens drawn with the
  // engine's sampler and the request's stream at each position.
  static Outcome reference(const RequestSpec& spec, int64_t chunk = 128) {
    auto seq = plain_->new_sequence();
    std::vector<v4::SequenceOutput> out(1);
    const auto& prompt = spec.prompt_ids;
    for (size_t b = 0; b < prompt.size(); b += chunk) {
      v4::SequenceInput in;
      in.state = seq.get();
      in.tokens = std::span<const int32_t>(prompt.data() + b, std::min<size_t>(chunk, prompt.size() - b));
      in.logits = b + chunk >= prompt.size() ? v4::LogitRows::kLast : v4::LogitRows::kNone;
      plain_->forward({&in, 1}, out);
    }
    TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
    Outcome o;
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (int32_t i = 0; i < spec.max_tokens; ++i, ++pos) {
      const int32_t t = sample_token(out[0].logits, spec.sampling, stream, pos);
      if (!spec.ignore_eos && t == plain_->config().eos_token_id) {
        o.finish = FinishReason::kStop;
        o.stop = t;
        return o;
      }
      o.tokens.push_back(t);
      if (i + 1 == spec.max_tokens) break;
      v4::SequenceInput in;
      in.state = seq.get();
      in.tokens = std::span<const int32_t>(&o.tokens.back(), 1);
      plain_->forward({&in, 1}, out);
    }
    o.finish = FinishReason::kLength;
    return o;
  }

  static std::vector<int32_t> prompt(std::mt19937& rng, int n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = 2 + static_cast<int32_t>(rng() % 4000);
    return p;
  }

  static void expect_model_layout(const ModelInfo& i) {
    EXPECT_EQ(checkpoint_identity(checkpoint_->dir()) + "; numerics exact", i.identity);
  }

  static const EngineModelCases& cases() {
    static const EngineModelCases c{
        .name = "V4",
        .layout = {.vocab_size = 4096, .window = 32, .max_draft_tokens = 7, .identity_prefix = "deepseek_v4:"},
        .concurrent = {.seed = 1, .long_prompt = 300, .tokens = {12, 10, 8, 20}, .budget = 256},
        .batch = {.seed = 2, .requests = 8, .max_prompt = 300, .min_tokens = 6, .budgets = {64, 200, 1024},
                  .serial_budget = 200},
        // The MTP block: a repeat resumes from a snapshot, which carries the MTP input row.
        .speculation = {.seed = 5, .prompts = {20, 90, 160, 230}, .tokens = {24, 24, 24, 24}, .draft_tokens = {1, 3},
                        .repeat = 3, .repeat_cached = 128},
        // Room for about two requests of 270 positions; replay off, since on V4 it is approximate.
        .preemption = {.seed = 6, .requests = 4, .prompt = 200, .tokens = 70, .sampled_temperature = 0.0f,
                       .fitting = 2, .blocks = 3, .swa_replay = false},
    };
    return c;
  }

  static TinyV4Checkpoint* checkpoint_;
  static std::shared_ptr<ModelRunner>* runner_;
  static v4::Model* plain_;
};

TinyV4Checkpoint* EngineV4::checkpoint_ = nullptr;
std::shared_ptr<ModelRunner>* EngineV4::runner_ = nullptr;
v4::Model* EngineV4::plain_ = nullptr;

INSTANTIATE_TYPED_TEST_SUITE_P(EngineV4, EngineModel, EngineV4);

// The serving default (--numerics fast, int8 expert products): the same requests alone, mixed under
// different budgets, and repeated so that they resume from the prefix cache give the same tokens.
TEST_F(EngineV4, FastNumericsOutputsDoNotDependOnTheBatchOrTheCache) {
  V4RunnerOptions ro;
  ro.model.numerics.mode = v4::NumericsMode::kFast;
  const std::shared_ptr<ModelRunner> fast = open_model(checkpoint_->dir(), ro);
  EXPECT_EQ(checkpoint_identity(checkpoint_->dir()) + "; numerics fast", fast->info().identity);
  std::mt19937 rng(5);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) {
    specs.push_back(fixed_length_spec(prompt(rng, 1 + static_cast<int>(rng() % 300)), 6 + static_cast<int>(rng() % 6),
                         i % 2 ? 0.9f : 0.0f, 20 + i));
  }
  const std::vector<Outcome> alone = run_each_alone(fast, specs);
  ASSERT_EQ(alone.size(), specs.size());
  for (int32_t budget : {64, 1024}) {
    EngineOptions o;
    o.max_batch_tokens = budget;
    auto engine = make_engine(fast, o);
    for (const char* pass : {"cold", "from the cache"}) {
      auto out = run_shuffled(*engine, specs, rng);
      ASSERT_EQ(out.size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        EXPECT_EQ(out[i].tokens, alone[i].tokens) << "budget " << budget << " " << pass << " request " << i;
      }
    }
  }
}

TEST_F(EngineV4, RepeatedPromptResumesBitwiseFromTheCache) {
  std::mt19937 rng(3);
  EngineOptions o;
  o.swa_replay = false;
  auto engine = make_engine(runner(), o);
  for (float temperature : {0.0f, 1.0f}) {
    RequestSpec s = fixed_length_spec(prompt(rng, 300), 12, temperature, 77);
    auto cold = run_all(*engine, {s});
    auto warm = run_all(*engine, {s});
    ASSERT_EQ(cold.size(), 1u);
    ASSERT_EQ(warm.size(), 1u);
    EXPECT_EQ(cold[0].cached, 0);
    EXPECT_EQ(warm[0].cached, 256);
    EXPECT_EQ(warm[0].tokens, cold[0].tokens);
    EXPECT_EQ(cold[0].tokens, reference(s).tokens);
  }
  // A second turn (prompt + answer + more) resumes at the first turn's last block boundary.
  RequestSpec t1 = fixed_length_spec(prompt(rng, 250), 20);
  auto a = run_all(*engine, {t1});
  ASSERT_EQ(a.size(), 1u);
  RequestSpec t2 = t1;
  t2.prompt_ids.insert(t2.prompt_ids.end(), a[0].tokens.begin(), a[0].tokens.end());
  auto more = prompt(rng, 30);
  t2.prompt_ids.insert(t2.prompt_ids.end(), more.begin(), more.end());
  auto b = run_all(*engine, {t2});
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].cached, 256);
  EXPECT_EQ(b[0].tokens, reference(t2).tokens);
}

// SWA bounded replay recomputes the last window of a hit with attention floored at its start. It is
// approximate by design. Documented tolerance on this random-weight model (chaotic: once one token
// differs the continuations part): the logits after the prompt within 5% relative RMS of a cold
// run's, and the first answer token unchanged.
TEST_F(EngineV4, BoundedReplayStaysWithinTolerance) {
  std::mt19937 rng(4);
  const auto shared = prompt(rng, 384);  // three blocks
  auto a_prompt = shared, b_prompt = shared;
  auto ta = prompt(rng, 200), tb = prompt(rng, 80);
  a_prompt.insert(a_prompt.end(), ta.begin(), ta.end());
  b_prompt.insert(b_prompt.end(), tb.begin(), tb.end());
  EngineOptions o;
  auto engine = make_engine(runner(), o);
  auto a = run_all(*engine, {fixed_length_spec(a_prompt, 2)});
  RequestSpec b = fixed_length_spec(b_prompt, 16);
  auto out = run_all(*engine, {b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cached, 384 - 32);  // window 32 recomputed
  EXPECT_EQ(engine->metrics().extra.at("prefix_cache_replay_hits_total"), 1);
  const Outcome want = reference(b);
  ASSERT_FALSE(out[0].tokens.empty());
  EXPECT_EQ(out[0].tokens[0], want.tokens[0]);

  // The logits themselves, cold against replayed, through the runner.
  auto cold = runner()->new_sequence();
  auto replayed = runner()->new_sequence();
  std::vector<float> lc, lr;
  ForwardItem item;
  item.seq = cold.get();
  item.tokens = b_prompt;
  runner()->forward({&item, 1}, lc);
  std::vector<std::shared_ptr<const KvBlock>> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(runner()->block(*cold, i));
  runner()->attach(*replayed, blocks, nullptr);
  ASSERT_EQ(replayed->length(), 384 - 32);
  item.seq = replayed.get();
  item.tokens = std::span<const int32_t>(b_prompt.data() + replayed->length(), b_prompt.size() - replayed->length());
  runner()->forward({&item, 1}, lr);
  double num = 0, den = 0;
  for (size_t i = 0; i < lc.size(); ++i) {
    num += (lc[i] - lr[i]) * (lc[i] - lr[i]);
    den += lc[i] * lc[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.05);
  std::printf("bounded replay: relative RMS logit error %.4f\n", std::sqrt(num / den));
  EXPECT_GT(num, 0.0) << "replay was expected to be approximate";
}

// Decoder-side bounded replay needs V4.1's encoder/decoder split: a V4 engine refuses it when made.
TEST_F(EngineV4, DecoderReplayIsRefused) {
  EXPECT_FALSE(runner()->info().supports_decoder_replay);
  EngineOptions o;
  o.decoder_replay_tokens = 140;
  try {
    make_engine(runner(), o);
    ADD_FAILURE() << "a V4 engine took decoder replay";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("encoder/decoder split"), std::string::npos) << e.what();
  }
}

// One runner, two engines at the same time, one drafting and one not (bench-serve shares a model the
// same way): the second engine's prepare() must not switch the drafter off under the first, and their
// forwards must not share scratch state. Both produce the plain loop's tokens.
TEST_F(EngineV4, OneRunnerServesTwoEnginesAtOnce) {
  auto shared = open_model(checkpoint_->dir());  // its own runner: the speculation setting outlives this test
  std::mt19937 rng(8);
  std::vector<RequestSpec> drafting, plain;
  for (int i = 0; i < 3; ++i) drafting.push_back(fixed_length_spec(prompt(rng, 30 + 60 * i), 16));
  for (int i = 0; i < 3; ++i) plain.push_back(fixed_length_spec(prompt(rng, 50 + 40 * i), 16, i == 1 ? 0.8f : 0.0f, 7));
  EngineOptions with_drafts;
  with_drafts.speculation = true;
  with_drafts.draft_tokens = 2;
  auto first = make_engine(shared, with_drafts);
  auto second = make_engine(shared, EngineOptions{});
  std::vector<Outcome> out_first;
  std::thread t([&] { out_first = run_all(*first, drafting); });
  const std::vector<Outcome> out_second = run_all(*second, plain);
  t.join();
  ASSERT_EQ(out_first.size(), drafting.size());
  ASSERT_EQ(out_second.size(), plain.size());
  for (size_t i = 0; i < drafting.size(); ++i) {
    EXPECT_EQ(out_first[i].finish, FinishReason::kLength) << out_first[i].error;
    EXPECT_EQ(out_first[i].tokens, reference(drafting[i]).tokens) << "drafting engine, request " << i;
  }
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(out_second[i].finish, FinishReason::kLength) << out_second[i].error;
    EXPECT_EQ(out_second[i].tokens, reference(plain[i]).tokens) << "plain engine, request " << i;
  }
  EXPECT_GT(first->metrics().draft_tokens_total, 0);
}

}  // namespace
}  // namespace dsinfer::engine::testing
