// A discrete-event simulation of a disaggregated cluster that runs the router's own balancer code
// (PrefillBalancer, DecodeBalancer) over a trace, with per-instance cost curves. README.md describes
// the model of a step, the handoff and every reported number.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "router/prefill_balancer.h"
#include "router/sim/cost_model.h"
#include "router/sim/trace.h"

namespace dsinfer::router::sim {

enum class DecodePolicy { kBalanced, kRoundRobin };

struct SimConfig {
  int prefill_instances = 1;
  int decode_instances = 1;
  CostModel cost = default_cost_model();
  PrefillBalancerConfig prefill;
  DecodePolicy decode_policy = DecodePolicy::kBalanced;
  double decode_count_weight = 0.5;
  double sample_interval_s = 1.0;  // imbalance and balance are sampled at this period
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

struct SimReport {
  int64_t requests = 0;
  int64_t completed = 0;
  int64_t rejected = 0;  // a sequence larger than one decode instance's KV capacity can never be placed
  double makespan_s = 0;          // first arrival to last completion
  double output_tokens_per_s = 0;
  Percentiles ttft_s;  // arrival to the first token (the prefill's)
  Percentiles tpot_s;  // (last token - first token) / (output - 1), requests with >= 2 output tokens
  Percentiles decode_wait_s;  // prefill end to decode placement (time the cluster was full)
  double prefill_utilisation = 0;  // busy time / (instances x makespan)
  double decode_utilisation = 0;
  double mean_decode_concurrency = 0;  // per busy decode step
  // Balance against a perfect assignment (README.md "Balance"): sum over samples of the mean instance load
  // over sum of the maximum; 1 is perfect.
  double prefill_balance = 1;  // load = busy time in the sample interval
  double decode_kv_balance = 1;  // load = KV tokens at the sample instant
  double decode_count_balance = 1;  // load = sequences at the sample instant
  // max/mean of the decode KV tokens over the samples: mean and worst.
  double decode_kv_imbalance_mean = 1, decode_kv_imbalance_max = 1;
  double prefill_imbalance_mean = 1, prefill_imbalance_max = 1;
  // Invariants, for tests: the highest share of its limits any decode instance reached (<= 1).
  double max_kv_share = 0, max_request_share = 0;
  int64_t decode_full_events = 0;  // sequences that found the cluster full and waited for decode room
  int64_t events = 0;
};

SimReport simulate(const std::vector<TraceRequest>& trace, const SimConfig& config);

// Nearest-rank percentile (p in (0, 100]) of unsorted values; 0 for none.
double percentile(std::vector<double> values, double p);

struct CapacityTarget {
  double ttft_s = 2.0;
  double tpot_s = 0.05;
  double percentile = 99;
  int max_prefill = 64;
  int max_decode = 128;
};

struct CapacityResult {
  bool met = false;
  int prefill_instances = 0, decode_instances = 0;
  SimReport report;  // of the answer
  int simulations = 0;
};

// The smallest cluster meeting the targets on the trace: first the fewest prefill instances whose TTFT
// percentile meets the target with max_decode decode instances, then, with those, the fewest decode
// instances that meet both. Binary searches: assumes more instances never make a percentile worse.
CapacityResult plan_capacity(const std::vector<TraceRequest>& trace, SimConfig config, const CapacityTarget& target);

std::string report_text(const SimReport& r);
std::string report_json(const SimReport& r);

}  // namespace dsinfer::router::sim
