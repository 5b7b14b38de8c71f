// Structured output through the engine on the synthetic model: a request's TokenConstraint masks every
// row it samples from, with and without speculation (drafts the constraint refuses are rejected and
// rolled back) and under preemption; the constraint ends up having accepted exactly the output. The
// masks are filled while the forward runs (overlap_masks), with the same tokens as without.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <limits>
#include <mutex>
#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

// After n accepted tokens, token t may come next iff t % 3 == n % 3 (never end of text), and from
// `length` tokens on only end of text (so the mask is never empty).
class ModuloConstraint final : public TokenConstraint {
 public:
  ModuloConstraint(int32_t vocab, int32_t eos, int32_t length) : vocab_(vocab), eos_(eos), length_(length) {}
  bool allowed(int32_t t) const {
    const int32_t n = static_cast<int32_t>(accepted.size());
    if (n >= length_) return t == eos_;
    return t != eos_ && t % 3 == n % 3;
  }
  void fill_mask(std::span<uint32_t> words) override {
    if (on_fill) on_fill();
    std::fill(words.begin(), words.end(), 0u);
    for (int32_t t = 0; t < vocab_; ++t) {
      if (allowed(t)) words[t >> 5] |= 1u << (t & 31);
    }
  }
  bool accept(int32_t t) override {
    if (!allowed(t)) return false;
    accepted.push_back(t);
    return true;
  }
  void rollback(int32_t n) override {
    ASSERT_LE(n, static_cast<int32_t>(accepted.size()));
    accepted.resize(accepted.size() - n);
  }
  std::vector<int32_t> accepted;
  std::function<void()> on_fill;

 private:
  int32_t vocab_, eos_, length_;
};

// The masked reference: each token drawn from the model's logits with the disallowed ones at -inf.
std::vector<int32_t> reference(ToyModel& model, const RequestSpec& spec, const ToyConfig& cfg, int32_t length) {
  ModuloConstraint c(cfg.vocab, cfg.eos, length);
  std::vector<int32_t> tokens = spec.prompt_ids, out;
  TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
  for (int32_t i = 0; i < spec.max_tokens; ++i) {
    std::vector<float> logits = model.reference_logits(tokens);
    for (int32_t t = 0; t < cfg.vocab; ++t) {
      if (!c.allowed(t)) logits[t] = -std::numeric_limits<float>::infinity();
    }
    const int32_t t = sample_token(logits, spec.sampling, stream, static_cast<int64_t>(tokens.size()));
    EXPECT_TRUE(c.accept(t));
    if (t == cfg.eos) break;
    tokens.push_back(t);
    out.push_back(t);
  }
  return out;
}

struct Workload {
  std::vector<RequestSpec> specs;
  std::vector<std::shared_ptr<ModuloConstraint>> constraints;
  std::vector<int32_t> lengths;
};

Workload make_run(const ToyConfig& cfg, float temperature) {
  std::mt19937 rng(5);
  Workload run;
  for (int i = 0; i < 8; ++i) {
    RequestSpec s;
    s.prompt_ids.resize(1 + rng() % 40);
    for (auto& t : s.prompt_ids) t = 2 + static_cast<int32_t>(rng() % (cfg.vocab - 2));
    s.max_tokens = 60;
    s.sampling.temperature = temperature;
    s.sampling.seed = 100 + i;
    run.lengths.push_back(5 + static_cast<int32_t>(rng() % 30));
    run.constraints.push_back(std::make_shared<ModuloConstraint>(cfg.vocab, cfg.eos, run.lengths.back()));
    s.constraint = run.constraints.back();
    run.specs.push_back(std::move(s));
  }
  return run;
}

TEST(Constraint, MasksEveryRowWithAndWithoutSpeculationAndUnderPreemption) {
  ToyConfig cfg;
  ToyModel model(cfg);
  for (float temperature : {0.0f, 0.8f}) {
    const Workload base = make_run(cfg, temperature);
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < base.specs.size(); ++i) want.push_back(reference(model, base.specs[i], cfg, base.lengths[i]));
    for (int k : {0, 1, 3}) {
      for (bool pressure : {false, true}) {
        std::vector<std::vector<int32_t>> without_overlap;
        for (bool overlap_masks : {false, true}) {
          Workload run = make_run(cfg, temperature);
          EngineOptions o;
          o.overlap_masks = overlap_masks;
          o.speculation = k > 0;
          o.draft_tokens = std::max(k, 1);
          o.max_batch_tokens = 40;
          o.max_running = 6;
          o.kv_budget_bytes = pressure ? 14000 : 1 << 24;
          o.swa_replay = false;
          auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
          auto out = run_all(*engine, run.specs);
          ASSERT_EQ(out.size(), run.specs.size());
          for (size_t i = 0; i < run.specs.size(); ++i) {
            SCOPED_TRACE(::testing::Message() << "t " << temperature << " k " << k << " pressure " << pressure
                                              << " overlap_masks " << overlap_masks << " req " << i);
            ASSERT_EQ(out[i].finish, FinishReason::kStop) << out[i].error;
            EXPECT_EQ(out[i].stop, cfg.eos);
            ASSERT_EQ(static_cast<int32_t>(out[i].tokens.size()), run.lengths[i]);
            for (size_t j = 0; j < out[i].tokens.size(); ++j) {
              EXPECT_EQ(out[i].tokens[j] % 3, static_cast<int32_t>(j % 3));
            }
            std::vector<int32_t> accepted = out[i].tokens;
            accepted.push_back(cfg.eos);
            EXPECT_EQ(run.constraints[i]->accepted, accepted);
            // Speculative sampling draws differently from plain decoding (same distribution); greedy and
            // non-speculative runs must equal the masked reference exactly.
            if (k == 0 || temperature == 0.0f) {
              EXPECT_EQ(out[i].tokens, want[i]);
            }
            // Speculative sampling included, the masks filled beside the forward give the same tokens.
            if (overlap_masks) {
              EXPECT_EQ(out[i].tokens, without_overlap[i]);
            } else {
              without_overlap.push_back(out[i].tokens);
            }
          }
          if (k > 0) {
            EXPECT_GT(engine->metrics().draft_tokens_total, 0);
          }
        }
      }
    }
  }
}

// Each forward of a lone request samples, so its mask is due: the forward waits (on the engine thread)
// until that mask has been filled. Without the overlap the mask comes only after the forward returns,
// so the wait gives up (bounded only so that a failure does not hang; then later forwards do not wait)
// and the test fails.
TEST(Constraint, MasksAreFilledWhileTheForwardRuns) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  std::mutex mu;
  std::condition_variable cv;
  int64_t fills = 0, forwards = 0, overlapped = 0;
  bool gave_up = false;
  auto constraint = std::make_shared<ModuloConstraint>(cfg.vocab, cfg.eos, 12);
  constraint->on_fill = [&] {
    std::lock_guard<std::mutex> lock(mu);
    ++fills;
    cv.notify_all();
  };
  model->before_forward = [&] {
    std::unique_lock<std::mutex> lock(mu);
    ++forwards;
    // One mask per forward: the k-th forward's is the k-th fill (the mask thread may get there before
    // the forward starts: the job is handed over just before it).
    if (!gave_up && cv.wait_for(lock, std::chrono::seconds(20), [&] { return fills >= forwards; })) {
      ++overlapped;
    } else {
      gave_up = true;
    }
  };
  RequestSpec s;
  s.prompt_ids = {5, 9, 14, 20};
  s.max_tokens = 30;
  s.sampling.temperature = 0.8f;
  s.sampling.seed = 3;
  s.constraint = constraint;
  EngineOptions o;
  o.swa_replay = false;
  auto engine = make_engine(model, o);
  auto out = run_all(*engine, {s});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].finish, FinishReason::kStop) << out[0].error;
  EXPECT_EQ(out[0].tokens.size(), 12u);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(forwards, 13);  // the prompt, then one per token (the 12th samples end of text)
  EXPECT_EQ(overlapped, forwards);
  // One constrained step per forward. (The wait is not asserted here: a forward is let go once its
  // mask's fill has begun, so the fill may end a little after it.)
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.extra.at("mask_steps_total"), 13.0);
  EXPECT_GT(m.extra.at("mask_seconds_total"), 0.0);
  EXPECT_GE(m.extra.at("mask_wait_seconds_total"), 0.0);
}

// Without the overlap each step's mask is filled after its forward: the wait is the masks' time.
TEST(Constraint, MaskMetricsWithoutTheOverlapCountTheWait) {
  ToyConfig cfg;
  RequestSpec s;
  s.prompt_ids = {5, 9, 14, 20};
  s.max_tokens = 30;
  s.constraint = std::make_shared<ModuloConstraint>(cfg.vocab, cfg.eos, 6);
  EngineOptions o;
  o.swa_replay = false;
  o.overlap_masks = false;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);
  auto out = run_all(*engine, {s});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].finish, FinishReason::kStop) << out[0].error;
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.extra.at("mask_steps_total"), 7.0);  // the prompt, then 6 tokens (the 6th samples end of text)
  EXPECT_GT(m.extra.at("mask_wait_seconds_total"), 0.0);
  EXPECT_GE(m.extra.at("mask_wait_seconds_total"), m.extra.at("mask_seconds_total"));
}

}  // namespace
}  // namespace dsinfer::engine::testing
