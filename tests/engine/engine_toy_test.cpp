// The engine over the synthetic model: outputs against an engine-free reference, stop conditions,
// cancellation, batch invariance over random schedules, prefix reuse, replay, preemption.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <optional>
#include <random>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

std::vector<int32_t> random_prompt(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(2, vocab - 1);  // avoid EOS (1) in prompts
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

EngineOptions small_options() {
  EngineOptions o;
  o.kv_budget_bytes = 1 << 24;
  o.max_batch_tokens = 64;
  o.max_running = 8;
  return o;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.finish, want.finish) << what << " error: " << got.error;
  EXPECT_EQ(got.stop, want.stop) << what;
}

TEST(EngineToy, GreedyAndSampledMatchTheReference) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  std::mt19937 rng(1);
  std::vector<RequestSpec> specs = {fixed_length_greedy(random_prompt(rng, 20, cfg.vocab), 30)};
  RequestSpec sampled = fixed_length_greedy(random_prompt(rng, 37, cfg.vocab), 25);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 10;
  sampled.sampling.seed = 5;
  specs.push_back(sampled);
  for (bool overlap : {false, true}) {
    EngineOptions o = small_options();
    o.overlap_scheduling = overlap;
    auto engine = make_engine(model, o);
    auto out = run_all(*engine, specs);
    ASSERT_EQ(out.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      expect_same(out[i], expected_outcome(reference, specs[i], cfg.eos), "request " + std::to_string(i));
      EXPECT_EQ(out[i].prompt, static_cast<int64_t>(specs[i].prompt_ids.size()));
    }
  }
}

TEST(EngineToy, StopConditions) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(2);
  RequestSpec base = fixed_length_greedy(random_prompt(rng, 10, cfg.vocab), 12);
  const Outcome free_run = expected_outcome(reference, base, cfg.eos);
  ASSERT_EQ(free_run.tokens.size(), 12u);
  auto model = std::make_shared<ToyModel>(cfg);
  auto engine = make_engine(model, small_options());

  RequestSpec stop_id = base;
  stop_id.stop_token_ids = {free_run.tokens[3]};
  RequestSpec short_run = base;
  short_run.max_tokens = 4;
  auto out = run_all(*engine, {stop_id, short_run});
  ASSERT_EQ(out.size(), 2u);
  const size_t first_stop = std::find(free_run.tokens.begin(), free_run.tokens.end(), free_run.tokens[3]) -
                            free_run.tokens.begin();
  EXPECT_EQ(out[0].finish, FinishReason::kStop);
  EXPECT_EQ(out[0].stop, free_run.tokens[3]);
  EXPECT_EQ(out[0].tokens, std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + first_stop));
  EXPECT_EQ(out[1].finish, FinishReason::kLength);
  EXPECT_EQ(out[1].tokens, std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + 4));

  // EOS stops unless ignore_eos: make the model's EOS the fourth token.
  ToyConfig eos_cfg = cfg;
  eos_cfg.eos = free_run.tokens[3];
  auto eos_engine = make_engine(std::make_shared<ToyModel>(eos_cfg), small_options());
  RequestSpec with_eos = base;
  with_eos.ignore_eos = false;
  out = run_all(*eos_engine, {with_eos, base});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].finish, FinishReason::kStop);
  EXPECT_EQ(out[0].stop, eos_cfg.eos);
  EXPECT_EQ(out[0].tokens.size(), first_stop);
  EXPECT_EQ(out[1].tokens, free_run.tokens);
  EXPECT_EQ(eos_engine->eos_token_id(), eos_cfg.eos);
}

TEST(EngineToy, SubmitRejectsBadRequestsWithReasons) {
  ToyConfig cfg;
  cfg.max_context = 100;
  auto engine = make_engine(std::make_shared<ToyModel>(cfg), small_options());
  EXPECT_EQ(engine->max_context(), 100);
  auto cb = [](const TokenEvent&) {};
  RequestSpec s = fixed_length_greedy({5, 6, 7}, 5);
  s.prompt_ids[1] = cfg.vocab;
  SubmitResult r = engine->submit(s, cb);
  EXPECT_EQ(r.status, SubmitStatus::kInvalid);
  EXPECT_NE(r.message.find("prompt_ids[1]"), std::string::npos) << r.message;
  s = fixed_length_greedy({}, 5);
  EXPECT_EQ(engine->submit(s, cb).status, SubmitStatus::kInvalid);
  s = fixed_length_greedy({5}, 0);
  EXPECT_EQ(engine->submit(s, cb).status, SubmitStatus::kInvalid);
  s = fixed_length_greedy({5}, 5);
  s.sampling.top_p = 1.5f;
  r = engine->submit(s, cb);
  EXPECT_EQ(r.status, SubmitStatus::kInvalid);
  EXPECT_NE(r.message.find("top_p"), std::string::npos);
  s = fixed_length_greedy(std::vector<int32_t>(90, 3), 20);
  EXPECT_EQ(engine->submit(s, cb).status, SubmitStatus::kTooLong);
  // A request that could never fit the KV budget is refused up front.
  EngineOptions tight = small_options();
  tight.kv_budget_bytes = 3000;
  auto tight_engine = make_engine(std::make_shared<ToyModel>(cfg), tight);
  r = tight_engine->submit(fixed_length_greedy(std::vector<int32_t>(50, 3), 40), cb);
  EXPECT_EQ(r.status, SubmitStatus::kTooLong);
  EXPECT_NE(r.message.find("KV"), std::string::npos);
}

TEST(EngineToy, QueueLimitAndCancellation) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  EngineOptions o = small_options();
  o.max_running = 1;
  o.max_queue = 2;
  auto engine = make_engine(model, o);
  Collector c;
  std::vector<RequestId> ids;
  int full = 0;
  for (int i = 0; i < 5; ++i) {
    SubmitResult r = engine->submit(fixed_length_greedy({3, 4, 5, 6}, 3000), c.callback(i));
    if (r.status == SubmitStatus::kQueueFull) {
      ++full;
      EXPECT_NE(r.message.find("queue"), std::string::npos);
    } else {
      ASSERT_EQ(r.status, SubmitStatus::kAccepted);
      ids.push_back(r.id);
    }
  }
  EXPECT_GE(full, 2);  // one runs, at most two wait
  c.expect(ids.size());
  for (RequestId id : ids) engine->cancel(id);
  ASSERT_TRUE(c.wait());
  for (size_t i = 0; i < 5; ++i) {
    const Outcome o2 = c.get(i);
    if (o2.events > 0) {
      EXPECT_EQ(o2.finish, FinishReason::kCancelled);
      EXPECT_LT(o2.tokens.size(), 3000u);
    }
  }
  engine->shutdown(true);
  EXPECT_EQ(model->live_sequences(), 0);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.kv_bytes_used, m.extra.at("prefix_cache_bytes"));  // only the cache holds KV now
  EXPECT_EQ(engine->submit(fixed_length_greedy({3}, 1), c.callback(9)).status, SubmitStatus::kShuttingDown);
}

TEST(EngineToy, CancelFromTheCallbackMidStream) {
  auto model = std::make_shared<ToyModel>(ToyConfig{});
  auto engine = make_engine(model, small_options());
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  size_t got = 0;
  FinishReason finish = FinishReason::kNone;
  RequestId id = 0;
  std::atomic<bool> cancelled{false};
  Engine* e = engine.get();
  SubmitResult r = engine->submit(fixed_length_greedy({3, 4, 5}, 4000), [&](const TokenEvent& ev) {
    std::lock_guard<std::mutex> lock(mu);
    got += ev.tokens.size();
    if (got >= 5 && !cancelled.exchange(true)) e->cancel(ev.id);
    if (ev.finish != FinishReason::kNone) {
      finish = ev.finish;
      done = true;
      cv.notify_all();
    }
  });
  id = r.id;
  ASSERT_NE(id, 0u);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }));
  EXPECT_EQ(finish, FinishReason::kCancelled);
  EXPECT_GE(got, 5u);
  EXPECT_LT(got, 4000u);
}

TEST(EngineToy, ShutdownWithoutDrainCancelsEverything) {
  auto model = std::make_shared<ToyModel>(ToyConfig{});
  auto engine = make_engine(model, small_options());
  Collector c;
  c.expect(6);
  for (int i = 0; i < 6; ++i) engine->submit(fixed_length_greedy({3, 4, 5}, 4000), c.callback(i));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  engine->shutdown(false);
  ASSERT_TRUE(c.wait());
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.get(i).finish, FinishReason::kCancelled);
  EXPECT_EQ(model->live_sequences(), 0);
}

// Random request mixes under random schedules: every request's tokens equal its reference, whatever
// ran beside it (batch invariance) and however it was chunked, cached or preempted.
TEST(EngineToy, BatchInvarianceOverRandomSchedules) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(3);
  std::vector<RequestSpec> specs;
  std::vector<int32_t> shared = random_prompt(rng, 40, cfg.vocab);
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> prompt;
    if (i % 3 == 0) prompt = shared;  // repeated prompts hit the prefix cache
    if (i % 3 == 1) {
      prompt = shared;
      auto tail = random_prompt(rng, 1 + static_cast<int>(rng() % 30), cfg.vocab);
      prompt.insert(prompt.end(), tail.begin(), tail.end());
    }
    if (i % 3 == 2) prompt = random_prompt(rng, 1 + static_cast<int>(rng() % 70), cfg.vocab);
    RequestSpec s = fixed_length_greedy(prompt, 1 + static_cast<int>(rng() % 40));
    if (rng() % 2) {
      s.sampling.temperature = 0.7f + 0.1f * static_cast<float>(rng() % 6);
      s.sampling.top_p = (rng() % 2) ? 0.9f : 1.0f;
      s.sampling.top_k = static_cast<int32_t>(rng() % 3) * 5;
      s.sampling.min_p = (rng() % 3 == 0) ? 0.02f : 0.0f;
      s.sampling.seed = rng();
      s.sampling.stream_key = i % 5;
    }
    s.ignore_eos = rng() % 4 != 0;
    specs.push_back(s);
  }
  std::vector<Outcome> want;
  for (const auto& s : specs) want.push_back(expected_outcome(reference, s, cfg.eos));

  struct Setup {
    int32_t batch_tokens, running;
    bool overlap, cache;
    int64_t budget;
    bool invariant = true;  // off: chunks fill the budget (the synthetic model is invariant regardless)
  };
  const std::vector<Setup> setups = {
      {1, 1, false, false, 1 << 24},  {7, 3, true, true, 1 << 24},     {16, 8, false, true, 1 << 24},
      {64, 32, true, true, 1 << 24},  {1000, 5, true, false, 1 << 24}, {33, 16, true, true, 12000},
      {200, 24, false, true, 9000},   {23, 6, true, true, 1 << 24, false},
  };
  for (const Setup& st : setups) {
    EngineOptions o;
    o.max_batch_tokens = st.batch_tokens;
    o.max_running = st.running;
    o.overlap_scheduling = st.overlap;
    o.prefix_cache = st.cache;
    o.swa_replay = false;  // replay is approximate by design; tested separately
    o.kv_budget_bytes = st.budget;
    o.batch_invariant = st.invariant;
    auto model = std::make_shared<ToyModel>(cfg);
    auto engine = make_engine(model, o);
    std::vector<size_t> order(specs.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    // Tight budgets: the whole workload is queued before the first step, so preemption is forced on
    // every run instead of depending on how submissions interleave with steps.
    const bool tight = st.budget < 20000;
    std::optional<ForwardGate> gate;
    if (tight) gate.emplace(*model);
    const int gap_us = static_cast<int>(rng() % 300);
    auto out = run_all(*engine, specs, order, tight ? 0 : gap_us, [&] {
      if (gate) gate->release();
    });
    ASSERT_EQ(out.size(), specs.size()) << "timed out";
    const std::string where = "batch_tokens " + std::to_string(st.batch_tokens) + " running " +
                              std::to_string(st.running) + " overlap " + std::to_string(st.overlap) + " cache " +
                              std::to_string(st.cache) + " budget " + std::to_string(st.budget) + " invariant " +
                              std::to_string(st.invariant);
    for (size_t i = 0; i < specs.size(); ++i) expect_same(out[i], want[i], where + " request " + std::to_string(i));
    EXPECT_LE(model->max_step_tokens(), st.batch_tokens) << where;
    EXPECT_LE(model->peak_bytes(), st.budget) << where;
    const EngineMetrics m = engine->metrics();
    int64_t generated = 0;
    for (const auto& w : want) generated += static_cast<int64_t>(w.tokens.size()) + (w.finish == FinishReason::kStop);
    EXPECT_EQ(m.generated_tokens_total, generated) << where;
    EXPECT_LE(m.kv_bytes_used, m.kv_bytes_budget) << where;
    if (tight) {
      EXPECT_GT(m.preempted_total, 0) << where << ": the tight budget was meant to force preemption";
    }
    if (st.cache) {
      EXPECT_GT(m.cached_tokens_total, 0) << where;
    }
    engine.reset();
    EXPECT_EQ(model->live_sequences(), 0);
  }
}

// Requests that each fit alone but not together: they are preempted and resumed (from cached blocks and
// snapshots, or recomputed without a cache) with exactly the output of an unconstrained run.
TEST(EngineToy, PreemptionKeepsOutputsAndTheBudget) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  std::mt19937 rng(8);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) {
    RequestSpec s = fixed_length_greedy(random_prompt(rng, 16, cfg.vocab), 100);
    if (i % 2) {
      s.sampling.temperature = 1.0f;
      s.sampling.seed = 100 + i;
    }
    specs.push_back(s);
  }
  std::vector<Outcome> want;
  for (const auto& s : specs) want.push_back(expected_outcome(reference, s, cfg.eos));
  for (bool cache : {true, false}) {
    for (bool overlap : {false, true}) {
      EngineOptions o = small_options();
      o.kv_budget_bytes = 12000;  // one request needs at most 500 + 8 blocks + a snapshot = 8800
      o.prefix_cache = cache;
      o.overlap_scheduling = overlap;
      auto model = std::make_shared<ToyModel>(cfg);
      ForwardGate gate(*model);  // all six queued before the first step: they must compete
      auto engine = make_engine(model, o);
      auto out = run_all(*engine, specs, {}, 0, [&] { gate.release(); });
      ASSERT_EQ(out.size(), specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        expect_same(out[i], want[i], "cache " + std::to_string(cache) + " overlap " + std::to_string(overlap) +
                                         " request " + std::to_string(i));
      }
      EXPECT_GT(engine->metrics().preempted_total, 0);
      EXPECT_LE(model->peak_bytes(), o.kv_budget_bytes);
    }
  }
}

TEST(EngineToy, RepeatedPromptResumesExactlyFromASnapshot) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  EngineOptions o = small_options();
  o.swa_replay = false;
  auto engine = make_engine(model, o);
  std::mt19937 rng(4);
  RequestSpec turn1 = fixed_length_greedy(random_prompt(rng, 50, cfg.vocab), 20);
  auto a = run_all(*engine, {turn1});
  const int64_t fed_cold = model->tokens_fed();
  auto b = run_all(*engine, {turn1});
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].cached, 0);
  EXPECT_EQ(b[0].cached, 48);  // the snapshot at the last block boundary before the prompt's end
  EXPECT_EQ(b[0].tokens, a[0].tokens);
  EXPECT_EQ(a[0].tokens, expected_outcome(reference, turn1, cfg.eos).tokens);
  EXPECT_EQ(model->tokens_fed() - fed_cold, fed_cold - 48);

  // Next turn: the previous prompt and answer plus new text resume at the answer's last boundary.
  RequestSpec turn2 = turn1;
  turn2.prompt_ids.insert(turn2.prompt_ids.end(), a[0].tokens.begin(), a[0].tokens.end());
  auto more = random_prompt(rng, 10, cfg.vocab);
  turn2.prompt_ids.insert(turn2.prompt_ids.end(), more.begin(), more.end());
  auto c = run_all(*engine, {turn2});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].cached, 64);  // fed 50 + 19 = 69 at the end of turn 1: boundary 64
  EXPECT_EQ(c[0].tokens, expected_outcome(reference, turn2, cfg.eos).tokens);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.cached_tokens_total, 48 + 64);
  EXPECT_EQ(m.extra.at("prefix_cache_exact_hits_total"), 2);
}

TEST(EngineToy, SharedPrefixWithoutSnapshotUsesBoundedReplay) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  auto engine = make_engine(model, small_options());
  std::mt19937 rng(5);
  const auto system = random_prompt(rng, 64, cfg.vocab);
  RequestSpec a = fixed_length_greedy(system, 5), b = fixed_length_greedy(system, 30);
  auto ta = random_prompt(rng, 40, cfg.vocab), tb = random_prompt(rng, 40, cfg.vocab);
  a.prompt_ids.insert(a.prompt_ids.end(), ta.begin(), ta.end());
  b.prompt_ids.insert(b.prompt_ids.end(), tb.begin(), tb.end());
  auto out_a = run_all(*engine, {a});
  auto out_b = run_all(*engine, {b});
  ASSERT_EQ(out_b.size(), 1u);
  // Four shared blocks (64 tokens); the last window (8) is recomputed with attention floored at 56.
  EXPECT_EQ(out_b[0].cached, 56);
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.extra.at("prefix_cache_replay_hits_total"), 1);
  // Replay is approximate; the synthetic model's window errors decay, so the greedy answer mostly agrees.
  const auto want = expected_outcome(reference, b, cfg.eos).tokens;
  ASSERT_EQ(out_b[0].tokens.size(), want.size());
  size_t same = 0;
  for (size_t i = 0; i < want.size(); ++i) same += out_b[0].tokens[i] == want[i];
  EXPECT_GE(same * 2, want.size()) << same << " of " << want.size();

  // With replay off the same hit falls back to a cold prefill (no snapshot covers it) and is exact.
  EngineOptions exact = small_options();
  exact.swa_replay = false;
  auto engine2 = make_engine(std::make_shared<ToyModel>(cfg), exact);
  run_all(*engine2, {a});
  auto out_b2 = run_all(*engine2, {b});
  ASSERT_EQ(out_b2.size(), 1u);
  EXPECT_EQ(out_b2[0].cached, 0);
  EXPECT_EQ(out_b2[0].tokens, want);

  // With a snapshot at every prompt block boundary the shared prefix resumes exactly.
  EngineOptions every = exact;
  every.snapshot_every_block = true;
  auto engine3 = make_engine(std::make_shared<ToyModel>(cfg), every);
  run_all(*engine3, {a});
  auto out_b3 = run_all(*engine3, {b});
  ASSERT_EQ(out_b3.size(), 1u);
  EXPECT_EQ(out_b3[0].cached, 64);
  EXPECT_EQ(out_b3[0].tokens, want);
}

TEST(EngineToy, MetricsAccountTokensAndMemory) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  EngineOptions o = small_options();
  auto engine = make_engine(model, o);
  std::mt19937 rng(6);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(fixed_length_greedy(random_prompt(rng, 30, cfg.vocab), 10));
  auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  const EngineMetrics m = engine->metrics();
  EXPECT_EQ(m.prompt_tokens_total, 180);
  EXPECT_EQ(m.generated_tokens_total, 60);
  EXPECT_GT(m.steps_total, 0);
  EXPECT_GT(m.step_seconds_total, 0);
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.kv_bytes_budget, o.kv_budget_bytes);
  EXPECT_EQ(m.extra.at("prefill_tokens_total"), 180);
  EXPECT_EQ(m.extra.at("decode_tokens_total"), 6 * 9);  // the last token of each is never fed
  EXPECT_EQ(m.extra.at("ttft_count"), 6);
  EXPECT_EQ(m.extra.at("finished_total"), 6);
  EXPECT_GE(m.extra.at("schedule_gap_seconds_total"), 0);
  // Blocks stay cached after the requests end: 30 + 9 fed = 39 positions, 2 full blocks each.
  EXPECT_EQ(m.extra.at("prefix_cache_blocks"), 12);
  EXPECT_EQ(m.kv_bytes_used, static_cast<int64_t>(m.extra.at("prefix_cache_bytes")));
  EXPECT_EQ(model->live_bytes(), m.kv_bytes_used);
}

}  // namespace
}  // namespace dsinfer::engine::testing
