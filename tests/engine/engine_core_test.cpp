// EngineCore driven step by step on one thread, in the sequential order (plan, launch, execute, apply)
// and in the overlapped order (plan n+1 before step n is applied): every request completes with its
// reference output, and after every phase the synthetic model holds no more memory than the engine
// accounted for, and the engine no more than its budget. Decode steps reuse one logits buffer.
#include "engine/engine_core.h"

#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

struct Case {
  bool overlapped, speculation, cache, adopt;
  int64_t budget;
  int32_t batch_tokens, running;
};

void drive(const Case& c, uint64_t seed) {
  ToyConfig cfg;
  cfg.adopt = c.adopt;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  EngineOptions o;
  o.max_batch_tokens = c.batch_tokens;
  o.max_running = c.running;
  o.kv_budget_bytes = c.budget;
  o.swa_replay = false;
  o.prefix_cache = c.cache;
  o.speculation = c.speculation;
  o.draft_tokens = 3;
  EngineCore core(model, o);
  std::mt19937 rng(seed);
  std::vector<int32_t> shared(40);
  for (auto& t : shared) t = 2 + static_cast<int32_t>(rng() % 60);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 16; ++i) {
    RequestSpec s;
    s.prompt_ids = i % 2 ? shared : std::vector<int32_t>{};
    const int extra = 1 + static_cast<int>(rng() % 40);
    for (int j = 0; j < extra; ++j) s.prompt_ids.push_back(2 + static_cast<int32_t>(rng() % 60));
    s.max_tokens = 1 + static_cast<int32_t>(rng() % 50);
    s.sampling.temperature = 0;
    s.ignore_eos = true;
    specs.push_back(s);
  }
  std::vector<std::vector<int32_t>> got(specs.size());
  std::vector<bool> done(specs.size(), false);
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(core.check(specs[i]).status, SubmitStatus::kAccepted);
    core.add(std::make_unique<Request>(i + 1, specs[i], nullptr, TokenStream(0, 0)));
  }
  auto check_memory = [&](const char* phase, int step) {
    const EngineMetrics m = core.metrics();
    ASSERT_LE(model->live_bytes(), m.kv_bytes_used) << phase << " of step " << step << "\n" << core.debug_string();
    ASSERT_LE(m.kv_bytes_used, c.budget) << phase << " of step " << step;
  };
  auto collect = [&] {
    for (PendingEvent& e : core.take_events()) {
      const size_t i = e.event.id - 1;
      got[i].insert(got[i].end(), e.event.tokens.begin(), e.event.tokens.end());
      if (e.event.finish != FinishReason::kNone) {
        EXPECT_EQ(e.event.finish, FinishReason::kLength) << e.event.error;
        done[i] = true;
      }
    }
  };
  int step = 0;
  if (c.overlapped) {
    StepPlan current = core.plan();
    core.launch(current);
    while (core.has_work() && step < 5000) {
      StepPlan next = core.plan();
      core.execute(current);
      check_memory("execute", step);
      core.apply(current);
      check_memory("apply", step);
      collect();
      core.launch(next);
      check_memory("launch", step);
      current = std::move(next);
      ++step;
    }
  } else {
    while (core.has_work() && step < 5000) {
      StepPlan p = core.plan();
      core.launch(p);
      check_memory("launch", step);
      core.execute(p);
      check_memory("execute", step);
      core.apply(p);
      check_memory("apply", step);
      collect();
      ++step;
    }
  }
  ASSERT_FALSE(core.has_work()) << "no progress after " << step << " steps\n" << core.debug_string();
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(done[i]) << i;
    EXPECT_EQ(got[i], expected_outcome(reference, specs[i], cfg.eos).tokens) << "request " << i;
  }
}

TEST(EngineCore, SequentialOrderKeepsAccountingAndOutputs) {
  for (int64_t budget : {int64_t{1} << 24, int64_t{14000}, int64_t{10000}}) {
    for (bool spec : {false, true}) {
      for (bool cache : {true, false}) drive({false, spec, cache, cache && budget > 10000, budget, 40, 6}, 1);
    }
  }
}

TEST(EngineCore, OverlappedOrderKeepsAccountingAndOutputs) {
  for (int64_t budget : {int64_t{1} << 24, int64_t{14000}, int64_t{10000}}) {
    for (bool spec : {false, true}) {
      for (bool cache : {true, false}) drive({true, spec, cache, cache && budget < 20000, budget, 33, 16}, 2);
    }
  }
}

// The step's logits (8 MB at 16 streams of a 129k vocabulary) go into one buffer kept across steps,
// with room for all the step's rows before the model appends them: a fresh vector per step was mapped,
// faulted in and regrown (copied) as the rows were appended.
TEST(EngineCore, StepLogitsReuseOneBufferWithRoomForTheRows) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  EngineOptions o;
  o.prefix_cache = false;
  EngineCore core(model, o);
  for (int i = 0; i < 4; ++i) {
    RequestSpec s;
    s.prompt_ids = {2, 3, static_cast<int32_t>(4 + i)};
    s.max_tokens = 6;
    s.sampling.temperature = 0;
    s.ignore_eos = true;
    ASSERT_EQ(core.check(s).status, SubmitStatus::kAccepted);
    core.add(std::make_unique<Request>(i + 1, s, nullptr, TokenStream(0, 0)));
  }
  for (int step = 0; core.has_work() && step < 100; ++step) {
    StepPlan plan = core.plan();
    core.launch(plan);
    core.execute(plan);
    core.apply(plan);
  }
  ASSERT_FALSE(core.has_work());
  const auto& seen = model->logits_buffers();
  ASSERT_GE(seen.size(), 6u);
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].size_in, 0u) << "forward " << i;
    EXPECT_GE(seen[i].capacity_in, seen[i].size_out) << "forward " << i;
    EXPECT_GT(seen[i].size_out, 0u) << "forward " << i;
  }
  // No step needs more rows than the first (4 prompts, then 4 decoding streams): one buffer throughout.
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_EQ(seen[i].data, seen[0].data) << "forward " << i;
}

}  // namespace
}  // namespace dsinfer::engine::testing
