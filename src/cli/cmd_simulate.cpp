// dsinfer simulate: a discrete-event simulation of a prefill/decode cluster running the router's own
// balancer code over a trace (a JSONL file or the built-in generator), with per-instance cost curves.
// Reports latency percentiles, utilisation and balance; with --capacity, the smallest (P, D) that meets
// the latency targets. The model and every number are described in src/router/sim/README.md.
#include <cstdio>
#include <fstream>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "router/sim/simulator.h"

namespace dsinfer::cli {
namespace {

int run_simulate(int argc, char** argv) {
  Args args("simulate",
            "Simulate a disaggregated cluster (P prefill x D decode instances) on a request trace with the router's\n"
            "balancers and per-instance cost curves; report TTFT/TPOT percentiles, utilisation and balance against\n"
            "a perfect assignment, or (--capacity) the smallest cluster that meets latency targets.");
  args.option("prefill", "N", "prefill instances", "1");
  args.option("decode", "N", "decode instances", "1");
  args.option("trace", "FILE", "JSONL trace: {\"arrival_s\", \"prompt_tokens\", \"output_tokens\", \"cached_tokens\"} "
              "per line (default: the generator below)");
  args.option("write-trace", "FILE", "also write the trace used (e.g. the generated one) as JSONL");
  args.option("requests", "N", "generator: number of requests", "1000");
  args.option("rate", "R", "generator: mean arrivals per second (Poisson)", "10");
  args.option("prompt-mean", "T", "generator: mean prompt tokens (log-normal)", "8192");
  args.option("prompt-sigma", "S", "generator: sigma of the prompt length's underlying normal", "1.0");
  args.option("prompt-max", "T", "generator: longest prompt", "1048576");
  args.option("output-mean", "T", "generator: mean output tokens (log-normal)", "512");
  args.option("output-sigma", "S", "generator: sigma of the output length's underlying normal", "0.8");
  args.option("output-max", "T", "generator: longest output", "32768");
  args.option("reuse-share", "F", "generator: share of requests continuing a conversation (prefix in the KV store)",
              "0.5");
  args.option("reuse-ratio", "F", "generator: share of such a request's prompt found in the KV store", "0.9");
  args.option("seed", "S", "generator: random seed", "1");
  args.option("costs", "FILE", "cost curves JSON (default: placeholder curves; see --print-costs)");
  args.flag("print-costs", "print the cost curves in use as JSON and exit");
  args.option("buckets", "LIST", "prefill bucket bounds by prompt tokens (4 buckets by default)", "16K,64K,256K");
  args.option("starvation", "SECONDS", "a queued prefill job waiting this long is no longer bypassed", "2");
  args.option("decode-policy", "P", "balanced (count + KV share) or round-robin (for comparison)", "balanced");
  args.option("count-weight", "W", "decode balancer: weight of the request-count share against the KV share", "0.5");
  args.option("sample-interval", "SECONDS", "period of the balance and imbalance samples", "1");
  args.flag("json", "print the report as JSON");
  args.flag("capacity", "find the smallest (P, D) meeting --target-ttft and --target-tpot on the trace");
  args.option("target-ttft", "SECONDS", "capacity: TTFT target at --target-percentile", "2");
  args.option("target-tpot", "SECONDS", "capacity: TPOT target at --target-percentile", "0.05");
  args.option("target-percentile", "P", "capacity: 50, 90 or 99", "99");
  args.option("max-prefill", "N", "capacity: most prefill instances to consider", "64");
  args.option("max-decode", "N", "capacity: most decode instances to consider", "128");
  if (!args.parse(argc, argv)) return args.exit_code();

  router::sim::SimConfig config;
  config.prefill_instances = static_cast<int>(args.get_int("prefill", 1, 100000));
  config.decode_instances = static_cast<int>(args.get_int("decode", 1, 100000));
  if (args.has("costs")) config.cost = router::sim::read_cost_model_file(args.get("costs"));
  if (args.has("print-costs")) {
    std::printf("%s\n", router::sim::cost_model_json(config.cost).c_str());
    return 0;
  }
  config.prefill.bucket_bounds = router::parse_bucket_bounds(args.get("buckets"));
  const double starvation = args.get_double("starvation");
  DSINFER_CHECK(starvation >= 0 && starvation < 1e6, "--starvation must be in [0, 1e6) seconds");
  config.prefill.starvation_ns = static_cast<int64_t>(starvation * 1e9);
  const std::string policy = args.get("decode-policy");
  DSINFER_CHECK(policy == "balanced" || policy == "round-robin", "--decode-policy: balanced or round-robin, not ",
                policy);
  config.decode_policy =
      policy == "balanced" ? router::sim::DecodePolicy::kBalanced : router::sim::DecodePolicy::kRoundRobin;
  config.decode_count_weight = args.get_double("count-weight");
  config.sample_interval_s = args.get_double("sample-interval");

  std::vector<router::sim::TraceRequest> trace;
  if (args.has("trace")) {
    trace = router::sim::read_trace_file(args.get("trace"));
  } else {
    router::sim::TraceGenerator g;
    g.requests = args.get_int("requests", 0, 100'000'000);
    g.rate = args.get_double("rate");
    g.prompt_mean = args.get_double("prompt-mean");
    g.prompt_sigma = args.get_double("prompt-sigma");
    g.prompt_max = args.get_int("prompt-max", 1, int64_t{1} << 40);
    g.output_mean = args.get_double("output-mean");
    g.output_sigma = args.get_double("output-sigma");
    g.output_max = args.get_int("output-max", 1, int64_t{1} << 40);
    g.reuse_share = args.get_double("reuse-share");
    g.reuse_ratio = args.get_double("reuse-ratio");
    g.seed = static_cast<uint64_t>(args.get_int("seed"));
    trace = router::sim::generate_trace(g);
  }
  if (args.has("write-trace")) {
    std::ofstream out(args.get("write-trace"));
    DSINFER_CHECK(out.good(), "cannot write ", args.get("write-trace"));
    router::sim::write_trace(out, trace);
  }

  if (args.has("capacity")) {
    router::sim::CapacityTarget t;
    t.ttft_s = args.get_double("target-ttft");
    t.tpot_s = args.get_double("target-tpot");
    t.percentile = args.get_double("target-percentile");
    t.max_prefill = static_cast<int>(args.get_int("max-prefill", 1, 100000));
    t.max_decode = static_cast<int>(args.get_int("max-decode", 1, 100000));
    const auto cap = router::sim::plan_capacity(trace, config, t);
    if (!cap.met) {
      std::printf("no cluster up to %dP x %dD meets TTFT <= %g s and TPOT <= %g s at p%g (%d simulations)\n",
                  t.max_prefill, t.max_decode, t.ttft_s, t.tpot_s, t.percentile, cap.simulations);
      return 3;
    }
    if (args.has("json")) {
      std::printf("{\"prefill\": %d, \"decode\": %d, \"simulations\": %d, \"report\": %s}\n", cap.prefill_instances,
                  cap.decode_instances, cap.simulations, router::sim::report_json(cap.report).c_str());
    } else {
      std::printf("smallest cluster: %dP x %dD (%d simulations)\n%s", cap.prefill_instances, cap.decode_instances,
                  cap.simulations, router::sim::report_text(cap.report).c_str());
    }
    return 0;
  }
  const auto report = router::sim::simulate(trace, config);
  if (args.has("json")) {
    std::printf("%s\n", router::sim::report_json(report).c_str());
  } else {
    std::printf("%dP x %dD, %s decode policy\n%s", config.prefill_instances, config.decode_instances, policy.c_str(),
                router::sim::report_text(report).c_str());
  }
  return 0;
}

}  // namespace

DSINFER_COMMAND("simulate", "simulate a prefill/decode cluster's balancers on a trace; capacity planning",
                run_simulate);

}  // namespace dsinfer::cli
