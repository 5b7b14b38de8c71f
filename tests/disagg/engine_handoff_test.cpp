// Disaggregation in the engine: a request prefilled by one engine (RequestSpec::export_state) and
// continued by another over a different model instance (RequestSpec::imported_state; only the exported
// bytes cross, as between a prefill and a decode process) produces bitwise the tokens and logprobs of
// the same request run whole in one engine: greedy and seeded sampling with penalties, at prompt lengths
// that end inside a block, speculation (MTP) off and on.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>

#include "../engine/tiny_v4_checkpoint.h"
#include "disagg/sequence_handoff.h"
#include "engine/deepseek_v4/v4_runner.h"
#include "engine/engine.h"

namespace dsinfer::disagg {
namespace {

using engine::FinishReason;
using engine::RequestSpec;
using engine::TokenEvent;

struct Result {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  std::shared_ptr<const std::vector<uint8_t>> exported;
  int64_t prompt_tokens = 0;
};

// Runs one request to its end.
Result run(engine::Engine& e, RequestSpec spec) {
  std::mutex mu;
  std::condition_variable cv;
  Result r;
  bool done = false;
  auto sub = e.submit(std::move(spec), [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    r.tokens.insert(r.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    r.logprobs.insert(r.logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
    r.prompt_tokens = ev.prompt_tokens;
    if (ev.finish != FinishReason::kNone) {
      r.finish = ev.finish;
      r.error = ev.error;
      r.exported = ev.exported_state;
      done = true;
      cv.notify_all();
    }
  });
  if (sub.status != engine::SubmitStatus::kAccepted) {
    r.finish = FinishReason::kError;
    r.error = "rejected: " + sub.message;
    return r;
  }
  std::unique_lock<std::mutex> lock(mu);
  if (!cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; })) {
    lock.unlock();
    e.shutdown(false);
    lock.lock();
    cv.wait(lock, [&] { return done; });
  }
  return r;
}

engine::V4RunnerOptions with_codec() {
  engine::V4RunnerOptions o;
  o.sequence_codec.save = [](const model::deepseek_v4::SequenceState& s, std::span<const float> hidden) {
    return export_sequence(s, hidden);
  };
  o.sequence_codec.load = [](const model::deepseek_v4::Model& m, std::span<const uint8_t> bytes,
                             std::vector<float>& hidden) {
    ImportedSequence imported = import_sequence(m, bytes);
    hidden = std::move(imported.last_hidden);
    return std::move(imported.state);
  };
  return o;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_same_logprobs(const std::vector<engine::TokenLogprobs>& want, const std::vector<engine::TokenLogprobs>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(want[i].logprob, got[i].logprob)) << "token " << i;
    ASSERT_EQ(want[i].top.size(), got[i].top.size()) << "token " << i;
    for (size_t j = 0; j < want[i].top.size(); ++j) {
      EXPECT_EQ(want[i].top[j].token, got[i].top[j].token) << "token " << i << " alternative " << j;
      EXPECT_TRUE(same_bits(want[i].top[j].logprob, got[i].top[j].logprob)) << "token " << i << " alternative " << j;
    }
  }
}

class EngineHandoff : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() { checkpoint_ = new engine::testing::TinyV4Checkpoint("dsinfer-engine-handoff"); }
  static void TearDownTestSuite() { delete checkpoint_; }

  // Three engines over three model instances: one runs requests whole, one prefills, one decodes.
  void SetUp() override {
    engine::EngineOptions eo;
    eo.kv_budget_bytes = int64_t{512} << 20;
    eo.speculation = GetParam();
    eo.draft_tokens = 1;
    whole_ = engine::make_engine(engine::open_model(checkpoint_->dir(), with_codec()), eo);
    auto prefill_runner = engine::open_model(checkpoint_->dir(), with_codec());
    prefill_runner->prepare(true, true);  // as serve --role prefill: the MTP state travels too
    prefill_ = engine::make_engine(prefill_runner, eo);
    decode_ = engine::make_engine(engine::open_model(checkpoint_->dir(), with_codec()), eo);
  }

  // `spec` prefilled by the prefill engine (its first token and the exported state) and continued by
  // the decode engine over the handed-over bytes; `out` gets both parts' tokens and logprobs, joined,
  // and the decode part's prompt_tokens. Call under ASSERT_NO_FATAL_FAILURE.
  void hand_off(const RequestSpec& spec, Result& out) {
    RequestSpec p = spec;
    p.export_state = true;
    const Result first = run(*prefill_, p);
    ASSERT_EQ(first.finish, FinishReason::kLength) << first.error;
    ASSERT_EQ(first.tokens.size(), 1u);
    ASSERT_NE(first.exported, nullptr);

    RequestSpec d = spec;
    d.prompt_ids.push_back(first.tokens[0]);
    d.imported_state = first.exported;
    const Result rest = run(*decode_, d);
    ASSERT_EQ(rest.finish, FinishReason::kLength) << rest.error;
    out = rest;
    out.tokens.insert(out.tokens.begin(), first.tokens.begin(), first.tokens.end());
    out.logprobs.insert(out.logprobs.begin(), first.logprobs.begin(), first.logprobs.end());
  }

  // The request whole, then prefilled + handed off + decoded: the same tokens and logprobs.
  void check(const RequestSpec& spec) {
    const Result whole = run(*whole_, spec);
    ASSERT_EQ(whole.finish, FinishReason::kLength) << whole.error;
    ASSERT_EQ(static_cast<int32_t>(whole.tokens.size()), spec.max_tokens);
    Result handed;
    ASSERT_NO_FATAL_FAILURE(hand_off(spec, handed));
    EXPECT_EQ(handed.prompt_tokens, static_cast<int64_t>(spec.prompt_ids.size()));
    EXPECT_EQ(handed.tokens, whole.tokens);
    expect_same_logprobs(whole.logprobs, handed.logprobs);
  }

  static std::vector<int32_t> prompt(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> p(n);
    for (auto& t : p) t = 2 + static_cast<int32_t>(rng() % 4000);
    return p;
  }

  static inline engine::testing::TinyV4Checkpoint* checkpoint_ = nullptr;
  std::unique_ptr<engine::Engine> whole_, prefill_, decode_;
};

TEST_P(EngineHandoff, GreedyContinuesBitwiseAtUnalignedLengths) {
  for (size_t n : {37u, 200u}) {
    SCOPED_TRACE(n);
    RequestSpec s = engine::fixed_length_greedy(prompt(n, static_cast<uint32_t>(n)), 24);
    s.sampling.top_logprobs = 2;
    check(s);
  }
}

// Temperature 0.8 with a seed: every token is drawn at its position of the request's stream; frequency
// and presence penalties must count the first token (drawn by the prefill engine) as output.
TEST_P(EngineHandoff, SeededSamplingWithPenaltiesContinuesBitwise) {
  RequestSpec s = engine::fixed_length_greedy(prompt(150, 7), 24);
  s.sampling.temperature = 0.8f;
  s.sampling.seed = 1234;
  s.sampling.frequency_penalty = 1.5f;
  s.sampling.presence_penalty = 0.5f;
  s.sampling.top_logprobs = 3;
  check(s);
}

// Failover: a stream whose decode worker died after 5 tokens is resumed by re-submitting prompt + those
// tokens (output_in_prompt = 5) to a fresh prefill/decode pair. The continuation is the uninterrupted
// run's, penalties included (they count the 5 tokens as output, not prompt), greedy and seeded, with
// speculation too: a verified token is the plain sampler's draw at its position, so it does not matter
// that the resumed run's verify steps do not line up with the uninterrupted run's.
TEST_P(EngineHandoff, ResumedStreamContinuesExactly) {
  for (const float temperature : {0.0f, 0.8f}) {
    SCOPED_TRACE(temperature);
    RequestSpec s = engine::fixed_length_greedy(prompt(140, 11), 20);
    s.sampling.temperature = temperature;
    s.sampling.seed = 99;
    s.sampling.frequency_penalty = 1.5f;
    s.sampling.presence_penalty = 0.5f;
    s.sampling.top_logprobs = 2;
    const Result whole = run(*whole_, s);
    ASSERT_EQ(whole.tokens.size(), 20u) << whole.error;

    constexpr int32_t kDone = 5;
    RequestSpec resumed = s;
    resumed.prompt_ids.insert(resumed.prompt_ids.end(), whole.tokens.begin(), whole.tokens.begin() + kDone);
    resumed.output_in_prompt = kDone;
    Result handed;
    ASSERT_NO_FATAL_FAILURE(hand_off(resumed, handed));
    std::vector<int32_t> joined(whole.tokens.begin(), whole.tokens.begin() + kDone);
    joined.insert(joined.end(), handed.tokens.begin(), handed.tokens.end());
    EXPECT_EQ(joined, whole.tokens);
    std::vector<engine::TokenLogprobs> lps(whole.logprobs.begin(), whole.logprobs.begin() + kDone);
    lps.insert(lps.end(), handed.logprobs.begin(), handed.logprobs.end());
    expect_same_logprobs(whole.logprobs, lps);

    // The same resume in one engine (a colocated server re-submitting) gives the same tail.
    const Result colocated = run(*decode_, resumed);
    ASSERT_EQ(colocated.finish, FinishReason::kLength) << colocated.error;
    EXPECT_EQ(colocated.tokens, std::vector<int32_t>(whole.tokens.begin() + kDone, whole.tokens.end()));
  }
}

INSTANTIATE_TEST_SUITE_P(Speculation, EngineHandoff, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "MtpOn" : "MtpOff"; });

// A request whose first token ends it hands nothing over; a model without a codec fails the request
// instead of pretending.
TEST(EngineHandoffLimits, NoStateWhenTheFirstTokenEndsTheRequestOrNoCodec) {
  engine::testing::TinyV4Checkpoint ckpt("dsinfer-engine-handoff-limits");
  engine::EngineOptions eo;
  eo.kv_budget_bytes = int64_t{256} << 20;
  auto with = engine::make_engine(engine::open_model(ckpt.dir(), with_codec()), eo);
  RequestSpec one = engine::fixed_length_greedy({5, 6, 7, 8, 9}, 1);
  one.export_state = true;
  const Result r1 = run(*with, one);
  EXPECT_EQ(r1.finish, FinishReason::kLength);
  EXPECT_EQ(r1.tokens.size(), 1u);
  EXPECT_EQ(r1.exported, nullptr);

  auto without = engine::make_engine(engine::open_model(ckpt.dir()), eo);
  RequestSpec two = engine::fixed_length_greedy({5, 6, 7, 8, 9}, 4);
  two.export_state = true;
  const Result r2 = run(*without, two);
  EXPECT_EQ(r2.finish, FinishReason::kError);
  EXPECT_NE(r2.error.find("cannot export"), std::string::npos) << r2.error;

  RequestSpec three = engine::fixed_length_greedy({5, 6, 7, 8, 9}, 4);
  three.imported_state = std::make_shared<const std::vector<uint8_t>>(std::vector<uint8_t>{1, 2, 3});
  const Result r3 = run(*with, three);
  EXPECT_EQ(r3.finish, FinishReason::kError);  // bytes that are not a sequence: the request fails alone
}

}  // namespace
}  // namespace dsinfer::disagg
