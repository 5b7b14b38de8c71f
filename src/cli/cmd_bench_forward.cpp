// dsinfer bench-forward: throughput of the DeepSeek-V4 forward pass itself (no engine, no sampling):
// prefill of a random prompt in chunks (logits of the last row only), then decode steps of one token
// for `--batch` sequences at once. Numbers, never pass/fail; run on a quiet machine.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/common_flags.h"
#include "cli/command.h"
#include "cli/stage_report.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"

namespace dsinfer::cli {
namespace {

namespace v4 = model::deepseek_v4;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// CPU seconds of the whole process (every thread): on a shared machine the work of a step, where wall
// time also counts the time other processes held the cores.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

int run_bench_forward(int argc, char** argv) {
  Args args("bench-forward",
            "Measure prefill and decode tokens/s of the DeepSeek-V4 forward pass. Decode is also reported as\n"
            "process CPU time per step and per token: with --threads 1 that is the work of a step even on a\n"
            "machine shared with other jobs, where the wall-clock rate mostly measures the load. The median\n"
            "and minimum CPU time of one step are printed too: a busy neighbour on the other hyperthread\n"
            "slows some steps, and the least disturbed ones compare binaries best.");
  add_model_flags(args);
  args.option("prompt-tokens", "N", "prompt length per sequence", "512");
  args.option("chunk-size", "N", "prefill chunk size", "512");
  args.option("decode-tokens", "N", "decode steps after the prompt", "32");
  args.option("batch", "B", "sequences decoded together (each prefilled alone)", "1");
  args.option("seed", "S", "token seed", "1");
  args.flag("breakdown",
            "also print where the timed decode steps' wall time goes, per stage, summed over the steps (ms, the "
            "serial part when the other threads idle, parallel regions) and in us per token: run --batch 1 and "
            "--batch 16 to see which stage stops gaining from the batch");
  if (!args.parse(argc, argv)) return args.exit_code();
  const int64_t T = args.get_int("prompt-tokens"), chunk = args.get_int("chunk-size");
  const int64_t steps = args.get_int("decode-tokens"), B = args.get_int("batch");
  DSINFER_CHECK(T >= 1 && chunk >= 1 && steps >= 0 && B >= 1, "bench-forward: sizes must be positive");

  v4::ModelOptions opt;
  const ModelFlags model_flags = read_model_flags(args);
  opt.numerics.mode = v4::parse_numerics_mode(model_flags.numerics);
  opt.numerics.kv_qdq = model_flags.kv_qdq;
  opt.threads = model_flags.threads;
  opt.prefault = true;
  const auto t0 = Clock::now();
  auto model = v4::Model::load(model_flags.dir, opt);
  const auto t1 = Clock::now();
  const int64_t vocab = model->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(args.get_int("seed")));
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));

  std::vector<std::unique_ptr<v4::SequenceState>> seqs;
  std::vector<v4::SequenceOutput> out(B);
  double prefill_s = 0;
  for (int64_t b = 0; b < B; ++b) {
    seqs.push_back(model->new_sequence());
    std::vector<int32_t> prompt(T);
    for (auto& t : prompt) t = tok(rng);
    const auto p0 = Clock::now();
    for (int64_t i = 0; i < T; i += chunk) {
      v4::SequenceInput in;
      in.state = seqs.back().get();
      in.tokens = std::span<const int32_t>(prompt.data() + i, std::min(chunk, T - i));
      in.logits = i + chunk >= T ? v4::LogitRows::kLast : v4::LogitRows::kNone;
      in.rollback = false;
      model->forward({&in, 1}, std::span<v4::SequenceOutput>(&out[b], 1));
    }
    prefill_s += seconds(p0, Clock::now());
  }
  std::vector<int32_t> next(B);
  for (auto& t : next) t = tok(rng);
  std::vector<v4::SequenceInput> batch(B);
  v4::StageProfile profile;
  if (args.has("breakdown")) {
    model->set_stage_profile(&profile);
    model->pool().set_region_timing(true);
  }
  std::vector<double> step_cpu;  // per step: on a shared machine the least loaded steps are the median and min
  step_cpu.reserve(steps);
  const auto d0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  for (int64_t s = 0; s < steps; ++s) {
    const double c0 = process_cpu_seconds();
    for (int64_t b = 0; b < B; ++b) {
      batch[b].state = seqs[b].get();
      batch[b].tokens = std::span<const int32_t>(&next[b], 1);
      batch[b].logits = v4::LogitRows::kLast;
      batch[b].rollback = false;
    }
    model->forward(batch, out);
    step_cpu.push_back(process_cpu_seconds() - c0);
    for (auto& t : next) t = tok(rng);
  }
  std::sort(step_cpu.begin(), step_cpu.end());
  const double decode_s = seconds(d0, Clock::now());
  const double decode_cpu_s = process_cpu_seconds() - cpu0;
  model->set_stage_profile(nullptr);
  model->pool().set_region_timing(false);
  const auto mem = seqs[0]->memory();
  std::printf("bench-forward: %s, %d threads, load %.2f s\n", model->shape().numerics.describe().c_str(),
              model->pool().size(), seconds(t0, t1));
  std::printf("  prefill: %lld x %lld tokens (chunks of %lld) in %.3f s = %.1f tok/s\n", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(chunk), prefill_s, static_cast<double>(B * T) / prefill_s);
  if (steps > 0) {
    std::printf("  decode:  %lld steps x batch %lld in %.3f s = %.2f steps/s, %.1f tok/s (context %lld..%lld)\n",
                static_cast<long long>(steps), static_cast<long long>(B), decode_s, steps / decode_s,
                static_cast<double>(steps * B) / decode_s, static_cast<long long>(T), static_cast<long long>(T + steps));
    // With --threads 1 this is the work per token whatever else runs on the machine (idle pool
    // threads that spin would count too).
    std::printf("  decode CPU: %.2f ms per step, %.2f ms per token (all threads of the process); step median %.2f ms, "
                "min %.2f ms\n",
                1e3 * decode_cpu_s / static_cast<double>(steps), 1e3 * decode_cpu_s / static_cast<double>(steps * B),
                1e3 * step_cpu[step_cpu.size() / 2], 1e3 * step_cpu.front());
  }
  if (steps > 0) {
    const std::string what = std::to_string(steps) + " decode steps of batch " + std::to_string(B);
    print_stage_totals(profile, decode_s, steps * B, model->pool().size(), what.c_str());
  }
  std::printf("  state of one sequence: %.2f MiB (blocks %.2f, windows %.2f, tails %.2f)\n", mem.total() / 1048576.0,
              (mem.full_blocks + mem.pending_blocks) / 1048576.0, mem.windows / 1048576.0, mem.tails / 1048576.0);
  return 0;
}

}  // namespace
DSINFER_COMMAND("bench-forward", "measure prefill/decode tokens/s of the DeepSeek-V4 forward pass", run_bench_forward);
}  // namespace dsinfer::cli
