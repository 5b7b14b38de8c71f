// dsinfer bench: prefill and single-stream decode speed of a model on this machine, next to the
// machine's measured limits. Decode reads every weight it touches once per token, so its bound is
// (weight bytes touched per decoded token) / (read bandwidth); prefill is bounded by the FMA peak.
// Serving curves (many streams, TTFT, speculation) are `dsinfer bench-serve`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/bench_decoder_replay.h"
#include "cli/common_flags.h"
#include "cli/stage_report.h"
#include "cli/command.h"
#include "core/error.h"
#include "kernels/cpu/machine_limits.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/model.h"
#include "model/inventory.h"
#if DSINFER_ENGINE_HAVE_V41
#include "engine/deepseek_v4/v4_runner.h"
#endif

namespace dsinfer::cli {
namespace {

namespace v4 = model::deepseek_v4;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// What one decoded token reads from the weights, by part of the model.
struct TokenTraffic {
  double attention = 0;   // wq_a/wq_b/wkv/wo_a/wo_b, norms, sinks
  double compressor = 0;  // KV compressors and the indexer (CSA/HCA layers)
  double shared = 0;      // shared experts
  double routed = 0;      // top-k routed experts (k / n_routed of all expert bytes)
  double router = 0;      // gate weights and biases
  double mhc = 0;         // hyper-connection projections
  double head = 0;        // lm head, final norm, hc head
  double embed = 0;       // one embedding row
  double engram = 0;      // V4.1 Engram: the looked-up table rows (with their scales), wkv, gate weights
  double engram_rows = 0; // of which the table rows
  double linear_macs = 0; // multiply-adds of the products (for the FLOP count)
  double total() const { return attention + compressor + shared + routed + router + mhc + head + embed + engram; }
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// From the checkpoint's own tensors (their stored sizes), for the backbone without MTP: every tensor of
// every layer is read once per token, except routed experts (top-k of them), the embedding (one row)
// and the hash-routing table (one row, ignored).
TokenTraffic token_traffic(const model::Checkpoint& ckpt) {
  const model::ModelConfig& c = ckpt.config();
  const double expert_share = static_cast<double>(c.num_experts_per_tok) / static_cast<double>(c.n_routed_experts);
  TokenTraffic t;
  for (const model::TensorSpec& spec : model::expected_tensors(c)) {
    if (spec.layer >= 0 && c.is_mtp_stage(spec.layer)) continue;
    // V4.1: the DSpark head (mtp.*) is not run while decoding; bias_vl acts only on image spans.
    if (spec.name.rfind("mtp.", 0) == 0 || contains(spec.name, ".gate.bias_vl")) continue;
    const model::TensorView* view = ckpt.find(spec.name);
    DSINFER_CHECK(view != nullptr, "bench: checkpoint ", ckpt.dir(), " has no tensor '", spec.name, "'");
    const double bytes = static_cast<double>(view->nbytes);
    const std::string& n = spec.name;
    double share = 1.0;
    double* part = nullptr;
    if (spec.kind == model::TensorKind::kEmbedding) {
      part = &t.embed;
      share = 1.0 / static_cast<double>(spec.shape.empty() ? 1 : spec.shape[0]);
    } else if (spec.kind == model::TensorKind::kTid2Eid) {
      continue;
    } else if (spec.kind == model::TensorKind::kEngramTable || spec.kind == model::TensorKind::kEngramScale) {
      part = &t.engram;  // columns() rows of the table per token (model-v41.md §2.15)
      share = static_cast<double>(c.engram->columns()) / static_cast<double>(spec.shape.at(0));
      t.engram_rows += bytes * share;
    } else if (contains(n, ".engram.")) {
      part = &t.engram;
    } else if (contains(n, ".ffn.experts.")) {
      part = &t.routed;
      share = expert_share;
    } else if (contains(n, ".ffn.shared_experts.")) {
      part = &t.shared;
    } else if (contains(n, ".ffn.gate.")) {
      part = &t.router;
    } else if (contains(n, ".attn.compressor.") || contains(n, ".attn.indexer.")) {
      part = &t.compressor;
    } else if (contains(n, ".attn.") || contains(n, "attn_norm")) {
      part = &t.attention;
    } else if (contains(n, "hc_attn") || contains(n, "hc_ffn") || contains(n, "ffn_norm")) {
      part = &t.mhc;
    } else if (spec.layer < 0) {
      part = &t.head;  // head.weight, norm.weight, hc_head_*
    } else {
      part = &t.attention;
    }
    *part += bytes * share;
    if (spec.kind == model::TensorKind::kLinearWeight || spec.kind == model::TensorKind::kHcFn) {
      const double elems = spec.kind == model::TensorKind::kLinearWeight
                               ? static_cast<double>(spec.rows) * static_cast<double>(spec.cols)
                               : static_cast<double>(view->numel());
      t.linear_macs += elems * share;
    }
  }
  return t;
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

// Per stage of the timed decode steps: wall ms per step (median and minimum over the steps: on a
// shared machine the minimum is the least disturbed step), parallel regions per step, the weight bytes
// the stage reads per token and the rate that makes at the minimum against the probe's bandwidth.
void print_breakdown(const v4::StageProfile& p, const TokenTraffic& t, const std::vector<double>& sampling_s,
                     const std::vector<double>& step_s, double bw, int threads) {
  using v4::Stage;
  auto bytes_of = [&](Stage s) {
    switch (s) {
      case Stage::kMhc: return t.mhc;
      case Stage::kAttnProducts: return t.attention + t.compressor;
      case Stage::kFfn: return t.shared + t.routed + t.router;
      case Stage::kHead: return t.head;
      case Stage::kOther: return t.embed;
      default: return 0.0;
    }
  };
  const size_t n = std::min(p.steps.size(), step_s.size());
  const double steps = static_cast<double>(std::max<size_t>(n, 1));
  std::printf("breakdown of %zu decode steps, %d threads (wall ms per step, median and minimum; GB/s = the stage's "
              "weight bytes / its minimum):\n", n, threads);
  std::printf("  %-22s %8s %8s %8s %6s %8s %10s %8s %7s\n", "stage", "median", "min", "serial", "share", "regions",
              "weights MB", "GB/s", "of bw");
  const double step_median = median_of(step_s);
  std::vector<double> outside(n);
  for (size_t k = 0; k < n; ++k) outside[k] = step_s[k] - (k < sampling_s.size() ? sampling_s[k] : 0.0);
  double sum_min = 0;
  uint64_t regions = 0;
  // serial: the median of the stage's time outside parallel regions (the other threads idle then).
  auto row = [&](const char* name, const std::vector<double>& v, const std::vector<double>* serial, double share_of,
                 double region_count, double b) {
    const double med = median_of(v), mn = min_of(v);
    sum_min += mn;
    std::printf("  %-22s %8.3f %8.3f ", name, med * 1e3, mn * 1e3);
    if (serial != nullptr) {
      std::printf("%8.3f", median_of(*serial) * 1e3);
    } else {
      std::printf("%8s", "");
    }
    std::printf(" %5.1f%%", 100.0 * med / share_of);
    if (region_count >= 0) std::printf(" %8.1f", region_count);
    if (b > 0) std::printf(" %10.1f %8.1f %6.0f%%", b / 1e6, b / mn / 1e9, 100.0 * b / mn / bw);
    std::printf("\n");
  };
  for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) {
    const Stage s = static_cast<Stage>(i);
    std::vector<double> v(n), serial(n);
    for (size_t k = 0; k < n; ++k) {
      v[k] = p.steps[k][i];
      serial[k] = p.serial[k][i];
      outside[k] -= p.steps[k][i];
    }
    regions += p.regions[i];
    row(v4::stage_name(s), v, &serial, step_median, static_cast<double>(p.regions[i]) / steps, bytes_of(s));
  }
  row("sampling (argmax)", sampling_s, &sampling_s, step_median, -1, 0);
  row("outside the forward", outside, &outside, step_median, -1, 0);
  const double all = t.total();
  std::printf("  %-22s %8.3f %8.3f %8s %5.1f%% %8.1f %10.1f %8.1f %6.0f%%\n", "step", step_median * 1e3,
              min_of(step_s) * 1e3, "", 100.0, static_cast<double>(regions) / steps, all / 1e6, all / min_of(step_s) / 1e9,
              100.0 * all / min_of(step_s) / bw);
  std::printf("  %-22s %17.3f %8s %6s %8s %10.1f %8.1f %6.0f%%   (each stage at its least disturbed step)\n",
              "sum of the minima", sum_min * 1e3, "", "", "", all / 1e6, all / sum_min / 1e9, 100.0 * all / sum_min / bw);
}

int run_bench(int argc, char** argv) {
  Args args("bench",
            "Prefill tokens/s and single-stream decode tokens/s of a model, with this machine's measured read\n"
            "bandwidth and FMA peak, the decode roofline (weight bytes touched per token / bandwidth; the bandwidth\n"
            "is probed before and after the runs and the higher probe taken) and the fraction of it reached\n"
            "(over all timed steps, and at the step median). A V4.1 checkpoint runs through its engine adapter (its FP8 weights read as\n"
            "stored, like V4's) and also reports the Engram table rows. The serving curves (prefill per core vs batch, decode vs concurrency,\n"
            "multi-turn TTFT, overlap, speculation) are `dsinfer bench-serve`; HTTP load is `dsinfer bench-http`.\n"
            "With --decoder-replay K (V4.1 only) it instead measures the decoder-side bounded replay against the\n"
            "exact forward: prefill time at each --prompt-len (a comma-separated list there), interleaved rounds,\n"
            "and the deviation of the next-token row and of a greedy continuation's rows.");
  add_model_flags(args, NumericsDefault::kFast);
  args.option("prompt-len", "N", "tokens of the prefill (one forward of N random tokens, timed after an untimed "
              "one of the same length, which is reported as the cold prefill; with --decoder-replay a "
              "comma-separated list)", "512");
  args.option("decoder-replay", "K",
              "V4.1: compare the decoder-side bounded replay of the last K prompt tokens (deepinfer-system.md 2.3; "
              "140 is DeepInfer's default) with the exact prefill, instead of the roofline bench (0 = off)", "0");
  args.option("replay-rounds", "N", "with --decoder-replay: timed prefills per mode and prompt length", "3");
  args.option("replay-decode", "N", "with --decoder-replay: greedy continuation rows compared after the prompt", "32");
  args.option("prefill-rounds", "N",
              "timed prefills, each of a fresh sequence after the untimed full-length warm-up; their median is "
              "reported (single prefills scatter up to 1.5x on a shared machine)",
              "3");
  args.option("decode-tokens", "N", "timed decode steps (greedy, one token each) after the prefill", "64");
  args.option("warmup", "N", "untimed decode steps before the timed ones", "4");
  args.option("bandwidth-mib", "MIB", "buffer of the bandwidth probe (well above the last-level cache)", "1024");
  args.option("seed", "S", "seed of the random prompt", "1");
  args.flag("breakdown",
            "V4: also print where a decode step's wall time goes, per stage (mHC/norms, attention products, "
            "compressor+indexer, attention core, FFN, head, other, sampling): ms per step (median and least disturbed), parallel regions per "
            "step, the serial part (time outside parallel regions, when the other threads idle), and the weight "
            "bytes the stage reads against its least disturbed time (GB/s, share of the measured bandwidth). "
            "Measured over the timed decode steps (the marks cost well under 0.1 percent of a step). Where a decode "
            "step runs each head group's attention core and its wo_a in one region (at most 16 rows, groups even "
            "over the threads), wo_a's time counts under attention core and its bytes under attention products, "
            "so that row's GB/s reads high; the window KV rows are decoded inside the query products' region, "
            "under attention products. Also, first, "
            "the timed prefill by the same stages: wall ms, serial ms, share, parallel regions and us per token");
  if (!args.parse(argc, argv)) return args.exit_code();
  if (const int64_t k = args.get_int("decoder-replay"); k != 0) {
    DSINFER_CHECK(k > 0, "--decoder-replay must be >= 0, got ", k);
    DecoderReplayBench b;
    const ModelFlags flags = read_model_flags(args);
    b.dir = flags.dir;
    b.kv_qdq = flags.kv_qdq;
    b.replay_tokens = k;
    b.rounds = args.get_int("replay-rounds", 1, 1000);
    b.decode_tokens = args.get_int("replay-decode", 0, 100000);
    b.seed = static_cast<uint32_t>(args.get_int("seed"));
    const std::string lens = args.get("prompt-len");
    for (size_t i = 0; i < lens.size();) {
      const size_t j = std::min(lens.find(',', i), lens.size());
      const std::string one = lens.substr(i, j - i);
      DSINFER_CHECK(!one.empty() && one.find_first_not_of("0123456789") == std::string::npos && std::stoll(one) >= 1,
                    "--prompt-len: '", one, "' is not a positive token count");
      b.prompt_lens.push_back(std::stoll(one));
      i = j + 1;
    }
    return run_decoder_replay_bench(b);
  }
  const int64_t prompt_len = args.get_int("prompt-len");
  const int64_t decode_tokens = args.get_int("decode-tokens");
  const int64_t warmup = args.get_int("warmup");
  const int64_t prefill_rounds = args.get_int("prefill-rounds");
  DSINFER_CHECK(prefill_rounds >= 1, "--prefill-rounds must be >= 1, got ", prefill_rounds);
  DSINFER_CHECK(prompt_len >= 1, "--prompt-len must be >= 1, got ", prompt_len);
  DSINFER_CHECK(decode_tokens >= 1, "--decode-tokens must be >= 1, got ", decode_tokens);
  DSINFER_CHECK(warmup >= 0, "--warmup must be >= 0, got ", warmup);
  const std::string dir = args.get("model");

  v4::ModelOptions opt;
  const ModelFlags model_flags = read_model_flags(args);
  opt.numerics.mode = v4::parse_numerics_mode(model_flags.numerics);
  opt.numerics.kv_qdq = model_flags.kv_qdq;
  opt.threads = model_flags.threads;
  opt.prefault = true;
  const model::ModelConfig config = model::ModelConfig::load(dir + "/config.json");
  // One stream of tokens through the model: feeds them, returns the greedy next token.
  using Step = std::function<int32_t(std::span<const int32_t>)>;
  std::function<Step()> new_stream;
  std::string numerics;
  int threads = 0;
  std::unique_ptr<v4::Model> model;
  std::vector<v4::SequenceOutput> out(1);
  const bool breakdown = args.has("breakdown");
  std::vector<double> sampling_s;  // argmax of the logits per step (with --breakdown)
  const auto t_load = Clock::now();
  if (config.arch == model::Architecture::kDeepseekV41) {
    DSINFER_CHECK(!breakdown, "bench: --breakdown measures the V4 forward only (", dir, " is a V4.1 checkpoint)");
#if DSINFER_ENGINE_HAVE_V41
    // V4.1 through its engine adapter (what serve runs); weights are prepared lazily, on the warm-up.
    engine::V4RunnerOptions ro;
    ro.model = opt;
    std::shared_ptr<engine::ModelRunner> runner = engine::open_model(dir, ro);
    threads = runner->pool().size();
    numerics = core::str_cat("V4.1 ", opt.numerics.fast() ? "fast" : "exact", ", kv qdq ", model_flags.kv_qdq ? "on" : "off");
    new_stream = [runner]() -> Step {
      std::shared_ptr<engine::SequenceState> seq = runner->new_sequence();
      return [runner, seq](std::span<const int32_t> tokens) {
        engine::ForwardItem item;
        item.seq = seq.get();
        item.tokens = tokens;
        item.logit_rows = 1;
        std::vector<float> logits;
        runner->forward({&item, 1}, logits);
        return argmax(logits);
      };
    };
#else
    core::fail("dsinfer bench: this build has no DeepSeek-V4.1 engine adapter");
#endif
  } else {
    model = v4::Model::load(dir, opt);
    threads = model->pool().size();
    numerics = model->shape().numerics.describe();
    new_stream = [&]() -> Step {
      std::shared_ptr<v4::SequenceState> seq = model->new_sequence();
      return [&, seq](std::span<const int32_t> tokens) {
        v4::SequenceInput in;
        in.state = seq.get();
        in.tokens = tokens;
        in.logits = v4::LogitRows::kLast;
        model->forward({&in, 1}, out);
        const auto t0 = Clock::now();
        const int32_t id = argmax(out[0].logits);
        sampling_s.push_back(seconds(t0, Clock::now()));
        return id;
      };
    };
  }
  const double load_s = seconds(t_load, Clock::now());

  // Limits first, with the model loaded (the same memory state as the runs), the pool idle.
  const int64_t probe_bytes = args.get_mib_as_bytes("bandwidth-mib", 1, 1 << 20);
  const auto limits = kernels::measure_machine_limits(threads, probe_bytes);
  const TokenTraffic traffic = token_traffic(*model::Checkpoint::open(dir));

  const int64_t vocab = config.vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(args.get_int("seed")));
  std::uniform_int_distribution<int32_t> random_token(2, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(prompt_len);
  for (auto& id : prompt) id = random_token(rng);
  // Untimed: one prefill of the same length first, which grows the workspaces to the prefill size
  // (a serving process keeps them; llama-bench also runs a warm-up) and, on V4.1, prepares the weights
  // it touches. Its time is reported as the cold prefill.
  double cold_s = 0;
  {
    Step warm = new_stream();
    const auto t0 = Clock::now();
    warm(prompt);
    cold_s = seconds(t0, Clock::now());
  }
  // Each round prefills a fresh sequence; decode continues the last one, and with --breakdown the
  // last round is the one broken down by stage.
  Step step;
  int32_t next = 0;
  std::vector<double> prefill_round_s;
  v4::StageProfile prefill_profile;
  for (int64_t r = 0; r < prefill_rounds; ++r) {
    step = nullptr;  // the previous round's sequence is freed before the next one is made
    step = new_stream();
    const bool profiled = breakdown && r + 1 == prefill_rounds;
    if (profiled) {
      model->set_stage_profile(&prefill_profile);
      model->pool().set_region_timing(true);
    }
    const auto t_prefill = Clock::now();
    next = step(prompt);
    prefill_round_s.push_back(seconds(t_prefill, Clock::now()));
    if (profiled) {
      model->set_stage_profile(nullptr);
      model->pool().set_region_timing(false);
    }
  }
  std::vector<double> prefill_sorted = prefill_round_s;
  std::sort(prefill_sorted.begin(), prefill_sorted.end());
  const double prefill_s = prefill_sorted[prefill_sorted.size() / 2];

  for (int64_t i = 0; i < warmup; ++i) next = step(std::span<const int32_t>(&next, 1));
  std::vector<double> step_s;
  step_s.reserve(decode_tokens);
  v4::StageProfile profile;
  if (breakdown) {
    model->set_stage_profile(&profile);
    model->pool().set_region_timing(true);
  }
  sampling_s.clear();
  const auto t_decode = Clock::now();
  for (int64_t i = 0; i < decode_tokens; ++i) {
    const auto t0 = Clock::now();
    next = step(std::span<const int32_t>(&next, 1));
    step_s.push_back(seconds(t0, Clock::now()));
  }
  const double decode_s = seconds(t_decode, Clock::now());
  if (breakdown) {
    model->set_stage_profile(nullptr);
    model->pool().set_region_timing(false);
  }
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  // The bandwidth again after the runs: on a shared machine one probe can fall into a busy moment
  // and read low, which would inflate the fraction of the roofline. The limit is the higher one.
  const auto bandwidth_after = kernels::measure_read_bandwidth(threads, probe_bytes);

  const double prefill_tps = static_cast<double>(prompt_len) / prefill_s;
  const double decode_tps = static_cast<double>(decode_tokens) / decode_s;
  const double bytes = traffic.total();
  const double bw = std::max(limits.bandwidth.gb_per_s, bandwidth_after.gb_per_s) * 1e9;
  const double roofline_tps = bw / bytes;
  const double median_step_s = sorted[sorted.size() / 2];
  const double prefill_gflops = 2.0 * traffic.linear_macs * prefill_tps / 1e9;

  std::printf("model %s: %s, %d threads, loaded in %.1f s\n", dir.c_str(), numerics.c_str(), threads, load_s);
  std::printf("%s", limits.describe().c_str());
  std::printf("memory read bandwidth after the runs: %.1f GB/s with %d threads (the roofline takes the higher of the "
              "two probes)\n",
              bandwidth_after.gb_per_s, bandwidth_after.threads);
  std::printf(
      "weights read per decoded token: %.1f MB (attention %.1f, compressors+indexer %.1f, shared experts %.1f, "
      "routed experts %.1f, router %.1f, mHC %.1f, head %.1f, embedding row %.3f, Engram %.3f of which table rows %.4f)\n",
      bytes / 1e6, traffic.attention / 1e6, traffic.compressor / 1e6, traffic.shared / 1e6, traffic.routed / 1e6,
      traffic.router / 1e6, traffic.mhc / 1e6, traffic.head / 1e6, traffic.embed / 1e6, traffic.engram / 1e6,
      traffic.engram_rows / 1e6);
  std::string rounds;
  for (double t : prefill_round_s) rounds += (rounds.empty() ? "" : ", ") + std::to_string(std::lround(prompt_len / t));
  std::printf(
      "prefill: %lld tokens in %.3f s = %.1f tok/s (median of %lld rounds: %s tok/s; products %.1f GFLOP/s = %.0f%% "
      "of the FMA peak); the first, cold prefill (workspaces growing) %.1f tok/s\n",
      static_cast<long long>(prompt_len), prefill_s, prefill_tps, static_cast<long long>(prefill_rounds),
      rounds.c_str(), prefill_gflops, 100.0 * prefill_gflops / limits.fma.gflops,
      static_cast<double>(prompt_len) / cold_s);
  std::printf(
      "decode: %lld tokens after %lld, %.2f tok/s (step median %.2f ms, min %.2f ms, max %.2f ms); roofline %.1f "
      "tok/s at %.1f GB/s; %.0f%% of the roofline (%.0f%% at the step median)\n",
      static_cast<long long>(decode_tokens), static_cast<long long>(prompt_len + warmup), decode_tps,
      median_step_s * 1e3, sorted.front() * 1e3, sorted.back() * 1e3, roofline_tps, bw / 1e9,
      100.0 * decode_tps / roofline_tps, 100.0 / (median_step_s * roofline_tps));
  if (breakdown) {
    const std::string what = "the prefill (" + std::to_string(prompt_len) + " tokens, one forward)";
    print_stage_totals(prefill_profile, prefill_round_s.back(), prompt_len, threads, what.c_str());
    print_breakdown(profile, traffic, sampling_s, step_s, bw, threads);
  }
  return 0;
}

}  // namespace
DSINFER_COMMAND("bench", "prefill and decode tokens/s against the machine's bandwidth roofline", run_bench);
}  // namespace dsinfer::cli
