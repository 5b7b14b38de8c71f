#include "router/sim/simulator.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"

namespace dsinfer::router::sim {
namespace {

// Constant costs make every time hand-computable: prefill 1000 tok/s at any batch, decode 100 tok/s in
// total at any concurrency (a step at concurrency c takes c/100 s), a free handoff.
SimConfig constant_config(int p, int d, int64_t step_tokens = 10000) {
  SimConfig c;
  c.prefill_instances = p;
  c.decode_instances = d;
  c.cost.prefill_step_tokens = step_tokens;
  c.cost.prefill_tokens_per_s = Curve({{1, 1000}}, "test");
  c.cost.decode_tokens_per_s = Curve({{1, 100}}, "test");
  c.cost.decode_max_requests = 64;
  c.cost.decode_kv_capacity_tokens = 1 << 20;
  c.cost.handoff_bytes_per_token = 0;
  c.cost.handoff_latency_s = 0;
  return c;
}

TEST(Simulator, OnePrefillOneDecodeExactTimes) {
  // 500 tokens at 1000 tok/s: first token at 0.5 s. Then two decode steps of 1/100 s: TPOT 0.01 s.
  const auto r = simulate({{0, 500, 3, 0}}, constant_config(1, 1));
  EXPECT_EQ(r.completed, 1);
  EXPECT_DOUBLE_EQ(r.ttft_s.p50, 0.5);
  EXPECT_DOUBLE_EQ(r.tpot_s.p50, 0.01);
  EXPECT_DOUBLE_EQ(r.makespan_s, 0.52);
}

TEST(Simulator, BatchedPrefillAndDecodeConcurrency) {
  // The worker computes the first request (100 tokens, 0-0.1 s) while two more arrive at 0.05; at 0.1 it
  // pulls both (quota 10000): one step of 1000 tokens, 0.1-1.1 s, TTFT 1.05 s. Both reach the decode
  // instance at 1.1; the first starts a step alone (1.1-1.11), then both run (1.11-1.13, the first is
  // done: TPOT 0.03/2), then the second alone (1.13-1.14: TPOT 0.04/2). Concurrency 1, 1, 1, 2, 1.
  const auto r = simulate({{0, 100, 3, 0}, {0.05, 500, 3, 0}, {0.05, 500, 3, 0}}, constant_config(1, 1));
  EXPECT_DOUBLE_EQ(r.ttft_s.p50, 1.05);
  EXPECT_DOUBLE_EQ(r.ttft_s.p99, 1.05);
  EXPECT_DOUBLE_EQ(r.tpot_s.p50, 0.015);
  EXPECT_DOUBLE_EQ(r.tpot_s.p99, 0.02);
  EXPECT_DOUBLE_EQ(r.mean_decode_concurrency, 1.2);
  // Arrivals at the same instant are not batched: the first starts a step the second cannot join.
  const auto same = simulate({{0, 500, 1, 0}, {0, 500, 1, 0}}, constant_config(1, 1));
  EXPECT_DOUBLE_EQ(same.ttft_s.p50, 0.5);
  EXPECT_DOUBLE_EQ(same.ttft_s.p99, 1.0);
}

TEST(Simulator, ChunkedPrefillAndPrefixReuse) {
  // Quota 300: a 500-token prompt runs as 300 + 200 tokens, 0.5 s in all.
  EXPECT_DOUBLE_EQ(simulate({{0, 500, 1, 0}}, constant_config(1, 1, 300)).ttft_s.p50, 0.5);
  // 400 of 500 tokens found in the KV store: 100 computed, 0.1 s.
  EXPECT_DOUBLE_EQ(simulate({{0, 500, 1, 400}}, constant_config(1, 1)).ttft_s.p50, 0.1);
}

TEST(Simulator, HandoffTimeDelaysDecode) {
  auto c = constant_config(1, 1);
  c.cost.handoff_bytes_per_token = 1000;
  c.cost.handoff_bytes_per_s = 1e6;  // 500 tokens x 1000 B at 1 MB/s: 0.5 s
  const auto r = simulate({{0, 500, 3, 0}}, c);
  EXPECT_DOUBLE_EQ(r.ttft_s.p50, 0.5);
  // Decode starts at 1.0 and ends at 1.02: (1.02 - 0.5) / 2 tokens.
  EXPECT_DOUBLE_EQ(r.tpot_s.p50, 0.26);
}

TEST(Simulator, FullClusterQueuesInOrder) {
  auto c = constant_config(1, 1);
  c.cost.decode_max_requests = 1;
  // A: prefill 0-0.5, 100 decode steps 0.5-1.5. B: prefill 0.5-1.0, waits for A's only slot until 1.5,
  // decodes 1.5-1.51: TPOT (1.51 - 1.0) / 1, wait 0.5 s.
  const auto r = simulate({{0, 500, 101, 0}, {0, 500, 2, 0}}, c);
  EXPECT_EQ(r.completed, 2);
  EXPECT_EQ(r.decode_full_events, 1);
  EXPECT_DOUBLE_EQ(r.tpot_s.p50, 0.01);
  EXPECT_DOUBLE_EQ(r.tpot_s.p99, 0.51);
  EXPECT_DOUBLE_EQ(r.decode_wait_s.p99, 0.5);
  EXPECT_DOUBLE_EQ(r.max_request_share, 1.0);
}

TEST(Simulator, SequenceLargerThanAnInstanceIsRejected) {
  auto c = constant_config(1, 1);
  c.cost.decode_kv_capacity_tokens = 1000;
  const auto r = simulate({{0, 500, 501, 0}, {0, 500, 500, 0}}, c);
  EXPECT_EQ(r.rejected, 1);
  EXPECT_EQ(r.completed, 1);
}

TEST(Simulator, NoInstanceEverOverItsLimitsUnderOverload) {
  TraceGenerator g;
  g.requests = 400;
  g.rate = 200;
  g.prompt_mean = 2000;
  g.output_mean = 200;
  g.seed = 3;
  auto c = constant_config(4, 3, 4096);
  c.cost.decode_max_requests = 8;
  c.cost.decode_kv_capacity_tokens = 40000;
  c.cost.prefill_tokens_per_s = Curve({{1, 200000}}, "fast");  // prefill outruns decode: the cluster fills
  const auto r = simulate(generate_trace(g), c);
  EXPECT_GT(r.decode_full_events, 0);
  EXPECT_LE(r.max_kv_share, 1.0);
  EXPECT_LE(r.max_request_share, 1.0);
  EXPECT_EQ(r.completed + r.rejected, 400);
}

TEST(Simulator, DeterministicForASeed) {
  TraceGenerator g;
  g.requests = 300;
  g.rate = 20;
  g.seed = 11;
  SimConfig c;
  c.prefill_instances = 3;
  c.decode_instances = 5;
  const auto a = report_json(simulate(generate_trace(g), c));
  EXPECT_EQ(a, report_json(simulate(generate_trace(g), c)));
  g.seed = 12;
  EXPECT_NE(a, report_json(simulate(generate_trace(g), c)));
}

TEST(Simulator, BalancedDecodeBeatsRoundRobinOnAlternatingSizes) {
  // Big and small sequences alternate; round robin over 2 instances puts every big one on instance 0, the
  // balancer spreads them by KV share.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 40; ++i) trace.push_back({i * 0.01, i % 2 == 0 ? 8000 : 100, 400, i % 2 == 0 ? 7999 : 99});
  auto c = constant_config(1, 2);
  c.cost.decode_tokens_per_s = Curve({{1, 1000}}, "test");
  c.sample_interval_s = 0.05;
  c.decode_policy = DecodePolicy::kRoundRobin;
  const auto rr = simulate(trace, c);
  c.decode_policy = DecodePolicy::kBalanced;
  const auto balanced = simulate(trace, c);
  EXPECT_LT(rr.decode_kv_balance, 0.6);  // all KV on one instance of two is 50%
  EXPECT_GT(balanced.decode_kv_balance, 0.9);
}

TEST(Simulator, CapacityFindsTheSmallestCluster) {
  // 10 requests/s of 1000-token prompts; one request per 1 s prefill step (quota 1000): 10 prefill
  // instances keep TTFT at exactly 1 s, 9 fall behind. Decode: one token each at 100 tok/s, one instance.
  std::vector<TraceRequest> trace;
  for (int i = 0; i < 100; ++i) trace.push_back({i * 0.1, 1000, 2, 0});
  CapacityTarget t;
  t.ttft_s = 1.0 + 1e-6;
  t.tpot_s = 0.01 + 1e-6;
  t.max_prefill = 16;
  t.max_decode = 8;
  const auto cap = plan_capacity(trace, constant_config(1, 1, 1000), t);
  ASSERT_TRUE(cap.met);
  EXPECT_EQ(cap.prefill_instances, 10);
  EXPECT_EQ(cap.decode_instances, 1);
  t.ttft_s = 0.5;  // below one step: unreachable
  EXPECT_FALSE(plan_capacity(trace, constant_config(1, 1, 1000), t).met);
}

TEST(Simulator, PercentileIsNearestRank) {
  std::vector<double> v = {10, 9, 8, 7, 6, 5, 4, 3, 2, 1};
  EXPECT_EQ(percentile(v, 50), 5);
  EXPECT_EQ(percentile(v, 90), 9);
  EXPECT_EQ(percentile(v, 99), 10);
  EXPECT_EQ(percentile({}, 99), 0);
}

TEST(CostModel, CurvesInterpolateAndClamp) {
  Curve c({{0, 10}, {10, 20}}, "t");
  EXPECT_DOUBLE_EQ(c.at(5), 15);
  EXPECT_DOUBLE_EQ(c.at(-1), 10);
  EXPECT_DOUBLE_EQ(c.at(100), 20);
  EXPECT_THROW(Curve({{1, 10}, {1, 20}}, "t"), core::Error);
  EXPECT_THROW(Curve({{1, 0}}, "t"), core::Error);
}

TEST(CostModel, JsonRoundTripAndPartialFiles) {
  const CostModel d = default_cost_model();
  const CostModel back = read_cost_model(cost_model_json(d), "t");
  EXPECT_EQ(cost_model_json(back), cost_model_json(d));
  const CostModel m = read_cost_model(R"({"decode": {"max_requests": 7, "tokens_per_s": [[1, 50], [4, 150]]}})", "t");
  EXPECT_EQ(m.decode_max_requests, 7);
  EXPECT_DOUBLE_EQ(m.decode_tokens_per_s.at(2), 50 + 100.0 / 3);
  EXPECT_EQ(m.prefill_step_tokens, d.prefill_step_tokens);
  EXPECT_THROW(read_cost_model(R"({"decode": {"tokens_per_s": [[1]]}})", "t"), core::Error);
  EXPECT_THROW(read_cost_model("[", "t"), core::Error);
}

TEST(Trace, JsonlRoundTripSortsAndRejectsBadLines) {
  std::istringstream in(
      "{\"arrival_s\": 2.5, \"prompt_tokens\": 10, \"output_tokens\": 3}\n"
      "\n"
      "{\"arrival_s\": 1, \"prompt_tokens\": 20, \"output_tokens\": 1, \"cached_tokens\": 5}\n");
  const auto t = read_trace(in, "t");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].prompt_tokens, 20);
  EXPECT_EQ(t[0].cached_tokens, 5);
  EXPECT_EQ(t[1].arrival_s, 2.5);
  std::ostringstream out;
  write_trace(out, t);
  std::istringstream again(out.str());
  const auto t2 = read_trace(again, "t2");
  ASSERT_EQ(t2.size(), 2u);
  EXPECT_EQ(t2[1].output_tokens, 3);
  std::istringstream bad1("{\"arrival_s\": 1, \"prompt_tokens\": 5, \"output_tokens\": 1, \"cached_tokens\": 5}\n");
  EXPECT_THROW(read_trace(bad1, "b"), core::Error);
  std::istringstream bad2("{\"arrival_s\": 1}\n");
  EXPECT_THROW(read_trace(bad2, "b"), core::Error);
  std::istringstream bad3("not json\n");
  EXPECT_THROW(read_trace(bad3, "b"), core::Error);
}

TEST(Trace, GeneratorIsDeterministicAndHasTheRequestedMeans) {
  TraceGenerator g;
  g.requests = 20000;
  g.rate = 50;
  g.prompt_mean = 4000;
  g.prompt_sigma = 0.5;
  g.output_mean = 300;
  g.output_sigma = 0.5;
  g.reuse_share = 0.25;
  g.seed = 5;
  const auto a = generate_trace(g);
  const auto b = generate_trace(g);
  ASSERT_EQ(a.size(), b.size());
  double prompt = 0, output = 0, reused = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].prompt_tokens, b[i].prompt_tokens);
    ASSERT_EQ(a[i].arrival_s, b[i].arrival_s);
    ASSERT_LT(a[i].cached_tokens, a[i].prompt_tokens);
    prompt += static_cast<double>(a[i].prompt_tokens);
    output += static_cast<double>(a[i].output_tokens);
    reused += a[i].cached_tokens > 0 ? 1 : 0;
  }
  const double n = static_cast<double>(a.size());
  // Sample means of 20000 draws (standard error about 0.4% at sigma 0.5): within 3% of the asked means.
  EXPECT_NEAR(prompt / n, 4000, 120);
  EXPECT_NEAR(output / n, 300, 9);
  EXPECT_NEAR(reused / n, 0.25, 0.02);
  EXPECT_NEAR(a.back().arrival_s, 20000 / 50.0, 20000 / 50.0 * 0.03);
}

}  // namespace
}  // namespace dsinfer::router::sim
