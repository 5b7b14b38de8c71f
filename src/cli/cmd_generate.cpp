// dsinfer generate: a plain greedy / temperature sampling loop over model/deepseek_v4 (the serving
// engine replaces it); prints the generated token ids.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "model/deepseek_v4/model.h"

namespace dsinfer::cli {
namespace {

namespace v4 = model::deepseek_v4;

int32_t sample(const float* logits, int64_t vocab, double temperature, std::mt19937_64& rng) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  if (temperature <= 0) return static_cast<int32_t>(best);
  double sum = 0;
  std::vector<double> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - logits[best]) / temperature);
    sum += p[i];
  }
  double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
  for (int64_t i = 0; i < vocab; ++i) {
    u -= p[i];
    if (u <= 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(best);
}

int run_generate(int argc, char** argv) {
  Args args("generate", "Generate tokens after a prompt (greedy, or sampled with --temperature) and print their ids.");
  args.option("model", "DIR", "checkpoint directory");
  args.option("prompt-ids", "IDS", "comma-separated prompt token ids");
  args.option("max-tokens", "N", "tokens to generate", "32");
  args.option("temperature", "T", "sampling temperature (0: greedy)", "0");
  args.option("seed", "S", "sampling seed", "0");
  args.option("chunk-size", "N", "prefill chunk size (0: whole prompt in one step)", "0");
  args.option("numerics", "MODE", "exact or reference", "exact");
  args.flag("no-kv-qdq", "turn off the KV FP8 and indexer FP4 QDQ (diagnostic)");
  args.flag("ignore-eos", "keep generating after the end-of-sequence token");
  args.option("threads", "N", "worker threads (0: DSINFER_THREADS or all cores)", "0");
  if (!args.parse(argc, argv)) return args.exit_code();

  const std::vector<int32_t> prompt = parse_id_list(args.get("prompt-ids"));
  const int64_t max_tokens = args.get_int("max-tokens");
  DSINFER_CHECK(max_tokens >= 0, "--max-tokens must be >= 0");
  const double temperature = args.get_double("temperature");
  int64_t chunk = args.get_int("chunk-size");
  if (chunk <= 0) chunk = static_cast<int64_t>(prompt.size());

  v4::ModelOptions opt;
  opt.numerics.mode = v4::parse_numerics_mode(args.get("numerics"));
  opt.numerics.kv_qdq = !args.has("no-kv-qdq");
  opt.threads = static_cast<int>(args.get_int("threads"));
  auto model = v4::Model::load(args.get("model"), opt);
  const int64_t vocab = model->config().vocab_size;
  const int32_t eos = static_cast<int32_t>(model->config().eos_token_id);
  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int("seed")));

  auto seq = model->new_sequence();
  std::vector<v4::SequenceOutput> out(1);
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    v4::SequenceInput in;
    in.state = seq.get();
    in.tokens = std::span<const int32_t>(prompt.data() + b, std::min<size_t>(chunk, prompt.size() - b));
    in.logits = b + chunk >= prompt.size() ? v4::LogitRows::kLast : v4::LogitRows::kNone;
    model->forward({&in, 1}, out);
  }
  const auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> generated;
  while (static_cast<int64_t>(generated.size()) < max_tokens) {
    const int32_t next = sample(out[0].logits.data(), vocab, temperature, rng);
    generated.push_back(next);
    std::printf("%s%d", generated.size() == 1 ? "" : ",", next);
    std::fflush(stdout);
    if (next == eos && !args.has("ignore-eos")) break;
    if (static_cast<int64_t>(generated.size()) == max_tokens) break;
    v4::SequenceInput in;
    in.state = seq.get();
    in.tokens = std::span<const int32_t>(&generated.back(), 1);
    model->forward({&in, 1}, out);
  }
  std::printf("\n");
  const auto t2 = std::chrono::steady_clock::now();
  const double pre = std::chrono::duration<double>(t1 - t0).count();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  const double steps = std::max<double>(1.0, static_cast<double>(generated.size()) - 1.0);
  std::fprintf(stderr, "generate: prefill %zu tokens in %.3f s (%.1f tok/s), decode %zu tokens in %.3f s (%.2f tok/s)\n",
               prompt.size(), pre, static_cast<double>(prompt.size()) / pre, generated.size(), dec,
               generated.size() > 1 ? steps / dec : 0.0);
  return 0;
}

}  // namespace
DSINFER_COMMAND("generate", "generate token ids after a prompt (greedy or sampled)", run_generate);
}  // namespace dsinfer::cli
