// dsinfer bench-serve: the serving engine's DeepInfer-style curves on one checkpoint.
//   prefill throughput per core against batch size,
//   decode per-request speed and total throughput against concurrency,
//   time to first token with and without a cached prefix over a multi-turn conversation,
//   overlap scheduling on/off and speculation acceptance,
//   with --schema: decode throughput with and without structured output (mask overlap on and off).
// Writes a table to stdout, CSV files and (with gnuplot) PNG plots into --out.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include "cli/args.h"
#include "cli/common_flags.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "recipe/structured_output.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"
#ifdef DSINFER_ENGINE_HAVE_V4
#include "engine/deepseek_v4/v4_runner.h"
#endif

namespace dsinfer::cli {
namespace {

using engine::Engine;
using engine::EngineOptions;
using engine::RequestSpec;
using engine::fixed_length_greedy;
using engine::TokenEvent;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Timing {
  Clock::time_point submitted, first, last;
  int64_t tokens = 0, cached = 0;
  std::vector<int32_t> ids;
  std::vector<std::pair<Clock::time_point, int64_t>> events;  // (when, tokens in the event)
  bool done = false;
  std::string error;
};

// Busy work standing in for what a server does per event (formatting, writing a stream frame).
void spin_for_us(int64_t us) {
  if (us <= 0) return;
  const auto until = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < until) {
  }
}

// Runs `specs` at once and returns per-request timings; each event costs `callback_us` of CPU. With
// `decode_cpu`, the process CPU time from the moment every request has its first token to the last
// event: the decode phase alone, without the prompts' prefill (which dominates at high concurrency).
std::vector<Timing> run_batch(Engine& engine, const std::vector<RequestSpec>& specs, int64_t callback_us = 0,
                              double* decode_cpu = nullptr) {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Timing> t(specs.size());
  size_t done = 0, started = 0;
  double cpu_all_started = 0, cpu_last = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    t[i].submitted = Clock::now();
    auto r = engine.submit(specs[i], [&, i](const TokenEvent& e) {
      spin_for_us(callback_us);
      const auto now = Clock::now();
      std::lock_guard<std::mutex> lock(mu);
      Timing& x = t[i];
      if (!e.tokens.empty() || e.finish != engine::FinishReason::kNone) {
        if (x.tokens == 0) {
          x.first = now;
          if (++started == specs.size() && decode_cpu != nullptr) cpu_all_started = cpu_seconds();
        }
        x.last = now;
        if (decode_cpu != nullptr) cpu_last = cpu_seconds();
      }
      x.tokens += static_cast<int64_t>(e.tokens.size());
      x.ids.insert(x.ids.end(), e.tokens.begin(), e.tokens.end());
      x.events.push_back({now, static_cast<int64_t>(e.tokens.size())});
      x.cached = e.cached_tokens;
      if (e.finish != engine::FinishReason::kNone) {
        x.done = true;
        x.error = e.error;
        ++done;
        cv.notify_all();
      }
    });
    DSINFER_CHECK(r.status == engine::SubmitStatus::kAccepted, "bench-serve: request refused: ", r.message);
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done == specs.size(); });
  for (const Timing& x : t) DSINFER_CHECK(x.error.empty(), "bench-serve: request failed: ", x.error);
  if (decode_cpu != nullptr) *decode_cpu = cpu_last - cpu_all_started;
  return t;
}

// Allows exactly the tokens of a recorded output, in order, then end of text: the forwards of the run
// that produced them, with a mask that costs next to nothing.
class ForcedConstraint final : public engine::TokenConstraint {
 public:
  ForcedConstraint(std::vector<int32_t> tokens, int32_t eos) : tokens_(std::move(tokens)), eos_(eos) {}
  void fill_mask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    const int32_t t = next();
    words[static_cast<size_t>(t) >> 5] |= 1u << (t & 31);
  }
  bool accept(int32_t token) override {
    if (token != next()) return false;
    ++at_;
    return true;
  }
  void rollback(int32_t n) override { at_ -= static_cast<size_t>(n); }

 private:
  int32_t next() const { return at_ < tokens_.size() ? tokens_[at_] : eos_; }
  std::vector<int32_t> tokens_;
  int32_t eos_;
  size_t at_ = 0;
};

// Times another constraint's fill_mask: log[stream] gets each fill's seconds, in order (one fill per
// step while nothing drafts, so a stream's k-th fill is its k-th decode step's mask).
class TimedConstraint final : public engine::TokenConstraint {
 public:
  TimedConstraint(std::shared_ptr<engine::TokenConstraint> inner, std::vector<double>* log)
      : inner_(std::move(inner)), log_(log) {}
  void fill_mask(std::span<uint32_t> words) override {
    const auto t0 = Clock::now();
    inner_->fill_mask(words);
    log_->push_back(since(t0, Clock::now()));
  }
  bool accept(int32_t token) override { return inner_->accept(token); }
  void rollback(int32_t n) override { inner_->rollback(n); }
  const engine::TokenConstraint& inner() const { return *inner_; }

 private:
  std::shared_ptr<engine::TokenConstraint> inner_;
  std::vector<double>* log_;
};

// The q-quantile (nearest rank) of `v`; 0 when empty.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Per step, the mask time of all streams together (the k-th fills summed): what one mask thread
// has to do beside the k-th forward.
std::vector<double> mask_seconds_per_step(const std::deque<std::vector<double>>& fills) {
  std::vector<double> steps;
  for (const auto& stream : fills) {
    if (steps.size() < stream.size()) steps.resize(stream.size(), 0.0);
    for (size_t k = 0; k < stream.size(); ++k) steps[k] += stream[k];
  }
  return steps;
}

std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int32_t vocab) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = 2 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 2));
  return v;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  for (int32_t x : parse_id_list(text)) out.push_back(x);
  return out;
}

void plot(const std::string& dir, const std::string& name, const std::string& title, const std::string& xlabel,
          const std::string& ylabel, const std::string& series, bool logx) {
  const std::string script = dir + "/" + name + ".gp";
  std::ofstream f(script);
  f << "set terminal pngcairo size 800,500 noenhanced\nset output '" << dir << "/" << name << ".png'\n"
    << "set title '" << title << "'\nset xlabel '" << xlabel << "'\nset ylabel '" << ylabel << "'\n"
    << "set datafile separator ','\nset key top left\nset grid\n" << (logx ? "set logscale x 2\n" : "")
    << "plot " << series << "\n";
  f.close();
  const std::string cmd = "gnuplot '" + script + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) {
    // pngcairo may be missing from gnuplot-nox: fall back to the plain png terminal.
    std::string text;
    {
      std::ifstream in(script);
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto at = text.find("pngcairo");
    if (at != std::string::npos) text.replace(at, 8, "png");
    std::ofstream(script) << text;
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "bench-serve: gnuplot failed for %s\n", name.c_str());
  }
}

int run_bench_serve(int argc, char** argv) {
  Args args("bench-serve",
            "Serving-engine benchmarks on a checkpoint: prefill throughput per core vs batch size, decode speed "
            "and throughput vs concurrency, TTFT with and without a cached prefix over a multi-turn trace, "
            "overlap scheduling and speculation. Table on stdout, CSV + PNG in --out.");
  add_model_flags(args, NumericsDefault::kFast);
  args.option("out", "DIR", "where CSV files and plots go", "bench-serve-out");
  args.option("prefill-len", "N", "prompt length of the prefill runs", "512");
  args.option("prefill-batches", "LIST", "batch sizes of the prefill curve", "1,2,4,8");
  args.option("decode-prompt", "N", "prompt length of the decode runs", "64");
  args.option("decode-tokens", "N", "tokens generated per request in the decode runs", "32");
  args.option("concurrency", "LIST", "concurrencies of the decode curve", "1,4,16,64");
  args.option("system-len", "N", "system prompt length of the multi-turn trace", "1024");
  args.option("turn-len", "N", "new user tokens per turn", "64");
  args.option("answer-len", "N", "answer tokens per turn", "32");
  args.option("turns", "N", "turns of the trace", "4");
  // The engine flags of serve and generate that fit a benchmark which sets batch sizes itself.
  args.option("kv-budget-mib", "MIB", "KV memory budget of the engine", "8192");
  args.option("decoder-replay", "K",
              "decoder-side bounded replay of every run's prompts (V4.1 only; 0: off; serve's --decoder-replay): "
              "measure the prefill rows with and without it",
              "0");
  args.option("callback-us", "N", "CPU cost per token event in the second overlap run (a server's work)", "200");
  args.flag("speculation", "also measure decode with MTP speculation (acceptance rate)");
  args.flag("skip-prefill", "skip the prefill curve");
  args.flag("skip-decode", "skip the decode curve");
  args.flag("skip-ttft", "skip the multi-turn TTFT trace");
  args.flag("skip-overlap", "skip the overlap on/off comparison");
  args.option("schema", "FILE",
              "also measure structured output: decode at each --concurrency without a constraint and with this "
              "JSON Schema (greedy; mask overlap on and off), interleaved; needs tokenizer.json in --model");
  args.option("schema-rounds", "N", "interleaved rounds of the --schema comparison", "3");
  args.option("schema-cache", "cold|warm",
              "--schema: cold = each schema run compiles the schema afresh (an empty token-mask cache, as a "
              "server's first request of a schema); warm = one compiled grammar for the whole process, warmed "
              "by an unmeasured run of each round's prompts first (a server's known schema)",
              "cold");
  if (!args.parse(argc, argv)) return args.exit_code();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured, also into a file
#ifndef DSINFER_ENGINE_HAVE_V4
  std::fprintf(stderr, "bench-serve: this build has no DeepSeek-V4 model library\n");
  return 1;
#else
  const std::string out_dir = args.get("out");
  std::filesystem::create_directories(out_dir);
  engine::V4RunnerOptions ro;
  const ModelFlags model_flags = read_model_flags(args);
  ro.model.numerics.mode = model::deepseek_v4::parse_numerics_mode(model_flags.numerics);
  ro.model.numerics.kv_qdq = model_flags.kv_qdq;
  const int threads = model_flags.threads;
  std::unique_ptr<core::ThreadPool> pool;
  if (threads > 0) {
    pool = std::make_unique<core::ThreadPool>(threads);
    ro.model.pool = pool.get();
  }
  const int cores = threads > 0 ? threads : core::ThreadPool::global().size();
  std::fprintf(stderr, "bench-serve: loading %s\n", model_flags.dir.c_str());
  auto model = engine::open_model(model_flags.dir, ro);
  const int32_t vocab = model->info().vocab_size;
  std::mt19937 rng(1234);
  EngineOptions base;
  base.kv_budget_bytes = args.get_mib_as_bytes("kv-budget-mib", 1, kMaxKvBudgetMib);
  base.max_running = 256;
  base.decoder_replay_tokens = static_cast<int32_t>(args.get_int("decoder-replay", 0, kMaxDecoderReplay));

  std::printf("dsinfer bench-serve: %s, %d cores%s\n\n", args.get("model").c_str(), cores,
              base.decoder_replay_tokens > 0
                  ? core::str_cat(", decoder replay of ", base.decoder_replay_tokens, " tokens").c_str()
                  : "");

  if (!args.has("skip-prefill")) {
    const int64_t len = args.get_int("prefill-len");
    std::ofstream csv(out_dir + "/prefill.csv");
    csv << "batch,tokens,seconds,tokens_per_s,tokens_per_s_per_core\n";
    std::printf("prefill (prompt %lld tokens, one forward per batch)\n%8s %10s %10s %14s %18s\n",
                static_cast<long long>(len), "batch", "tokens", "seconds", "tok/s", "tok/s/core");
    for (int64_t b : parse_list(args.get("prefill-batches"))) {
      EngineOptions o = base;
      o.prefix_cache = false;
      o.max_batch_tokens = static_cast<int32_t>(std::max<int64_t>(2048, b * len));
      auto engine = engine::make_engine(model, o);
      std::vector<RequestSpec> specs;
      for (int64_t i = 0; i < b; ++i) specs.push_back(fixed_length_greedy(random_ids(rng, len, vocab), 1));
      run_batch(*engine, {fixed_length_greedy(random_ids(rng, 16, vocab), 1)});  // warm-up
      const auto t0 = Clock::now();
      auto t = run_batch(*engine, specs);
      Clock::time_point end = t0;
      for (const auto& x : t) end = std::max(end, x.last);
      const double s = since(t0, end);
      const double tps = static_cast<double>(b * len) / s;
      std::printf("%8lld %10lld %10.3f %14.1f %18.2f\n", static_cast<long long>(b), static_cast<long long>(b * len), s,
                  tps, tps / cores);
      csv << b << "," << b * len << "," << s << "," << tps << "," << tps / cores << "\n";
    }
    std::printf("\n");
    csv.close();
    plot(out_dir, "prefill", "prefill throughput per core", "batch size (sequences)", "tokens/s/core",
         "'" + out_dir + "/prefill.csv' every ::1 using 1:5 with linespoints title 'prefill'", true);
  }

  struct DecodeResult {
    double per_request = 0, total = 0;  // tokens/s
    double cpu_seconds = 0;             // process CPU time of the decode phase (user + system)
    int64_t tokens = 0, decode_tokens = 0;  // all, and those after every request had its first token
    engine::EngineMetrics metrics;
    std::vector<std::vector<int32_t>> ids;  // each request's output
  };
  // Null: unconstrained requests; else request i gets a constraint of its own from `make_constraint(i)`.
  using ConstraintMaker = std::function<std::shared_ptr<engine::TokenConstraint>(size_t)>;
  // prompts: null for fresh random ones.
  auto decode_run = [&](int64_t c, bool overlap, bool speculation, int64_t callback_us = 0,
                        const ConstraintMaker& make_constraint = nullptr, bool overlap_masks = true,
                        const std::vector<std::vector<int32_t>>* prompts = nullptr) {
    EngineOptions o = base;
    o.prefix_cache = false;
    o.overlap_scheduling = overlap;
    o.overlap_masks = overlap_masks;
    o.speculation = speculation;
    o.max_batch_tokens = static_cast<int32_t>(std::max<int64_t>(2048, c * args.get_int("decode-prompt")));
    auto engine = engine::make_engine(model, o);
    const int32_t n = static_cast<int32_t>(args.get_int("decode-tokens"));
    std::vector<RequestSpec> specs;
    for (int64_t i = 0; i < c; ++i) {
      specs.push_back(fixed_length_greedy(
          prompts != nullptr ? prompts->at(i) : random_ids(rng, args.get_int("decode-prompt"), vocab), n));
      if (make_constraint) specs.back().constraint = make_constraint(static_cast<size_t>(i));
    }
    DecodeResult r;
    auto t = run_batch(*engine, specs, callback_us, &r.cpu_seconds);
    // Decode phase: from the moment every request has its first token to the last token; total
    // throughput counts the tokens delivered inside it, per-request speed each request's own rate.
    Clock::time_point start = t[0].first, end = t[0].last;
    for (const auto& x : t) {
      start = std::max(start, x.first);
      end = std::max(end, x.last);
    }
    double speed = 0;
    int64_t inside = 0;
    for (const auto& x : t) {
      if (x.tokens > 1) speed += static_cast<double>(x.tokens - 1) / std::max(1e-9, since(x.first, x.last));
      for (const auto& [when, k] : x.events) inside += when > start ? k : 0;
      r.tokens += x.tokens;
    }
    r.per_request = speed / static_cast<double>(c);
    for (auto& x : t) r.ids.push_back(std::move(x.ids));
    r.decode_tokens = inside;
    r.total = static_cast<double>(inside) / std::max(1e-9, since(start, end));
    r.metrics = engine->metrics();
    return r;
  };
  auto per_step_ms = [](const engine::EngineMetrics& m, const char* what) {
    return 1000.0 * m.extra.at(what) / static_cast<double>(std::max<int64_t>(1, m.steps_total));
  };

  if (!args.has("skip-decode")) {
    std::ofstream csv(out_dir + "/decode.csv");
    csv << "concurrency,per_request_tokens_per_s,total_tokens_per_s,speedup_vs_1,tokens_per_cpu_s,cpu_speedup_vs_1,"
           "forward_ms_per_step,gap_ms_per_step\n";
    std::printf("decode (prompt %lld, %lld tokens each; tok/cpu-s = decode-phase tokens per second of process CPU time in that phase (prefill excluded), which "
                "a busy machine does not distort)\n%12s %18s %12s %8s %12s %8s %10s %8s\n",
                static_cast<long long>(args.get_int("decode-prompt")),
                static_cast<long long>(args.get_int("decode-tokens")), "concurrency", "per-request tok/s",
                "total tok/s", "vs 1", "tok/cpu-s", "vs 1", "fwd ms", "gap ms");
    double single = 0, single_cpu = 0;
    for (int64_t c : parse_list(args.get("concurrency"))) {
      const DecodeResult r = decode_run(c, true, false);
      const double per_cpu = static_cast<double>(r.decode_tokens) / std::max(1e-9, r.cpu_seconds);
      if (single == 0) {
        single = r.total;
        single_cpu = per_cpu;
      }
      const double fwd = per_step_ms(r.metrics, "forward_seconds_total");
      const double gap = per_step_ms(r.metrics, "schedule_gap_seconds_total");
      std::printf("%12lld %18.2f %12.2f %7.2fx %12.2f %7.2fx %10.1f %8.2f\n", static_cast<long long>(c), r.per_request,
                  r.total, r.total / single, per_cpu, per_cpu / single_cpu, fwd, gap);
      csv << c << "," << r.per_request << "," << r.total << "," << r.total / single << "," << per_cpu << ","
          << per_cpu / single_cpu << "," << fwd << "," << gap << "\n";
    }
    std::printf("\n");
    csv.close();
    plot(out_dir, "decode", "decode against concurrency", "concurrent requests", "tokens/s",
         "'" + out_dir + "/decode.csv' every ::1 using 1:2 with linespoints title 'per request', '" + out_dir +
             "/decode.csv' every ::1 using 1:3 with linespoints title 'total'",
         true);
  }

  if (!args.has("skip-overlap")) {
    const int64_t cb = args.get_int("callback-us");
    std::printf("overlap scheduling (decode, concurrency 16; callbacks cost 0 or %lld us per event)\n%10s %12s %14s "
                "%14s %14s\n",
                static_cast<long long>(cb), "overlap", "callback us", "total tok/s", "gap ms/step", "fwd ms/step");
    std::ofstream csv(out_dir + "/overlap.csv");
    csv << "overlap,callback_us,total_tokens_per_s,gap_ms_per_step,forward_ms_per_step\n";
    for (int64_t us : {int64_t{0}, cb}) {
      for (bool overlap : {false, true}) {
        const DecodeResult r = decode_run(16, overlap, false, us);
        const double gap = per_step_ms(r.metrics, "schedule_gap_seconds_total");
        const double fwd = per_step_ms(r.metrics, "forward_seconds_total");
        std::printf("%10s %12lld %14.2f %14.3f %14.2f\n", overlap ? "on" : "off", static_cast<long long>(us), r.total,
                    gap, fwd);
        csv << overlap << "," << us << "," << r.total << "," << gap << "," << fwd << "\n";
      }
    }
    std::printf("\n");
  }

  if (auto schema_path = args.get_optional("schema")) {
    // Greedy and ignore_eos, as the decode runs. The forward's cost depends on the tokens (MoE experts
    // by token: 16 streams writing the same JSON share experts), so the baseline is "forced": the same
    // prompts forced through the tokens the schema run produced, with a one-token mask that costs
    // nothing. A request whose JSON is complete goes on with end of text only (cheap masks), so the
    // table also gives how many tokens came before it.
    const std::string tok_path = (std::filesystem::path(model_flags.dir) / "tokenizer.json").string();
    DSINFER_CHECK(std::filesystem::is_regular_file(tok_path), "bench-serve: --schema needs ", tok_path);
    const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(tok_path);
    const std::string cache_mode = args.get("schema-cache");
    DSINFER_CHECK(cache_mode == "cold" || cache_mode == "warm", "bench-serve: --schema-cache is cold or warm, not ",
                  cache_mode);
    const bool cold = cache_mode == "cold";
    // The compiled grammar (and with it the token-mask cache) lives in a StructuredOutput: cold runs
    // get a new one each (its vocabulary trie, 0.2 s, is built before the run's clock starts).
    auto shared_structured = std::make_unique<server::StructuredOutput>(tok, model->info().eos_token_id);
    std::unique_ptr<server::StructuredOutput> run_structured;
    recipe::OutputConstraintRequest request;
    request.kind = recipe::OutputConstraintRequest::Kind::kJsonSchema;
    {
      std::ifstream in(*schema_path);
      DSINFER_CHECK(in.good(), "bench-serve: cannot read --schema ", *schema_path);
      request.source = nlohmann::ordered_json::parse(in).dump();
    }
    std::vector<std::shared_ptr<TimedConstraint>> made;
    std::deque<std::vector<double>> fills;  // per stream of the run: each mask's seconds (stable addresses)
    const ConstraintMaker make = [&](size_t i) {
      if (i == 0) {
        made.clear();
        fills.clear();
        if (cold) run_structured = std::make_unique<server::StructuredOutput>(tok, model->info().eos_token_id);
      }
      if (fills.size() <= i) fills.resize(i + 1);
      server::StructuredOutput& structured = cold ? *run_structured : *shared_structured;
      made.push_back(std::make_shared<TimedConstraint>(structured.constraint_for(request, false), &fills[i]));
      return made.back();
    };
    std::printf("structured output (decode, greedy, %s, %s mask cache; total tok/s in interleaved rounds, same "
                "prompts in a row; ratios to 'forced' = the schema run's tokens at no mask cost; 'JSON' = mean "
                "tokens before the JSON was complete; per schema run (o = overlap, a = after the forward): mask "
                "ms per step for all streams, median / p99, and the forward's wait for masks, ms per step)\n"
                "%6s %5s %8s %8s %8s %8s %7s %7s %6s %17s %17s %7s %7s\n",
                schema_path->c_str(), cache_mode.c_str(), "round", "conc", "free", "forced", "overlap", "after",
                "o/f", "a/f", "JSON", "o mask med/p99", "a mask med/p99", "o wait", "a wait");
    std::ofstream csv(out_dir + "/structured.csv");
    csv << "round,concurrency,cache,free_tokens_per_s,forced_tokens_per_s,schema_overlap_tokens_per_s,"
           "schema_after_tokens_per_s,json_tokens,overlap_mask_ms_median,overlap_mask_ms_p99,after_mask_ms_median,"
           "after_mask_ms_p99,overlap_wait_ms_per_step,after_wait_ms_per_step\n";
    struct MaskTimes {
      double median_ms = 0, p99_ms = 0, wait_ms = 0;
    };
    auto mask_times = [&](const DecodeResult& r) {
      const std::vector<double> steps = mask_seconds_per_step(fills);
      MaskTimes t;
      t.median_ms = 1000.0 * quantile(steps, 0.5);
      t.p99_ms = 1000.0 * quantile(steps, 0.99);
      t.wait_ms = per_step_ms(r.metrics, "mask_wait_seconds_total");
      return t;
    };
    // The first run at a concurrency in a process is slower whatever it does (first use of its
    // buffers): one unconstrained run each, unmeasured, so that round 1's first column does not pay it.
    for (int64_t c : parse_list(args.get("concurrency"))) decode_run(c, true, false);
    for (int64_t round = 1; round <= args.get_int("schema-rounds"); ++round) {
      for (int64_t c : parse_list(args.get("concurrency"))) {
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t i = 0; i < c; ++i) prompts.push_back(random_ids(rng, args.get_int("decode-prompt"), vocab));
        if (!cold) decode_run(c, true, false, 0, make, false, &prompts);  // warms the shared grammar's cache
        const DecodeResult overlapped = decode_run(c, true, false, 0, make, true, &prompts);
        const MaskTimes o_masks = mask_times(overlapped);
        // What a constraint accepted before end of text is the JSON (the grammar allows nothing else).
        double json_tokens = 0;
        for (const auto& m : made) {
          const auto* g = dynamic_cast<const server::GrammarConstraint*>(&m->inner());
          if (g != nullptr) json_tokens += static_cast<double>(g->matcher().tokens_before_end());
        }
        json_tokens /= static_cast<double>(std::max<size_t>(1, made.size()));
        const DecodeResult after = decode_run(c, true, false, 0, make, false, &prompts);
        const MaskTimes a_masks = mask_times(after);
        const int32_t eos = model->info().eos_token_id;
        const DecodeResult forced = decode_run(c, true, false, 0, [&](size_t i) {
          return std::make_shared<ForcedConstraint>(overlapped.ids.at(i), eos);
        }, true, &prompts);
        if (forced.ids != overlapped.ids || after.ids != overlapped.ids) {
          std::fprintf(stderr, "bench-serve: warning: the schema runs and the forced run produced different tokens\n");
        }
        const DecodeResult unconstrained = decode_run(c, true, false, 0, nullptr, true, &prompts);
        char o_cell[32], a_cell[32];
        std::snprintf(o_cell, sizeof o_cell, "%.2f / %.2f", o_masks.median_ms, o_masks.p99_ms);
        std::snprintf(a_cell, sizeof a_cell, "%.2f / %.2f", a_masks.median_ms, a_masks.p99_ms);
        std::printf("%6lld %5lld %8.2f %8.2f %8.2f %8.2f %7.3f %7.3f %6.1f %17s %17s %7.2f %7.2f\n",
                    static_cast<long long>(round), static_cast<long long>(c), unconstrained.total, forced.total,
                    overlapped.total, after.total, overlapped.total / forced.total, after.total / forced.total,
                    json_tokens, o_cell, a_cell, o_masks.wait_ms, a_masks.wait_ms);
        csv << round << "," << c << "," << cache_mode << "," << unconstrained.total << "," << forced.total << ","
            << overlapped.total << "," << after.total << "," << json_tokens << "," << o_masks.median_ms << ","
            << o_masks.p99_ms << "," << a_masks.median_ms << "," << a_masks.p99_ms << "," << o_masks.wait_ms << ","
            << a_masks.wait_ms << "\n";
      }
    }
    std::printf("\n");
  }

  if (args.has("speculation")) {
    std::printf("speculation (MTP, 1 draft per step)\n%12s %14s %18s %12s\n", "concurrency", "total tok/s",
                "acceptance rate", "tokens/step");
    std::ofstream csv(out_dir + "/speculation.csv");
    csv << "concurrency,total_tokens_per_s,acceptance_rate,tokens_per_step\n";
    for (int64_t c : {int64_t{1}, int64_t{16}}) {
      const DecodeResult r = decode_run(c, true, true);
      const engine::EngineMetrics& m = r.metrics;
      const double rate = m.draft_tokens_total ? static_cast<double>(m.accepted_draft_tokens_total) /
                                                     static_cast<double>(m.draft_tokens_total)
                                               : 0.0;
      const double per_step = static_cast<double>(m.generated_tokens_total) / static_cast<double>(m.steps_total);
      std::printf("%12lld %14.2f %18.3f %12.2f\n", static_cast<long long>(c), r.total, rate, per_step);
      csv << c << "," << r.total << "," << rate << "," << per_step << "\n";
    }
    std::printf("\n");
  }

  if (!args.has("skip-ttft")) {
    const int64_t turns = args.get_int("turns");
    const int32_t answer = static_cast<int32_t>(args.get_int("answer-len"));
    std::ofstream csv(out_dir + "/ttft.csv");
    csv << "turn,prompt_tokens,cached_tokens,ttft_cold_s,ttft_cached_s\n";
    std::printf("multi-turn TTFT (system %lld, +%lld user tokens and %d answer tokens per turn)\n%6s %14s %14s %14s "
                "%16s\n",
                static_cast<long long>(args.get_int("system-len")), static_cast<long long>(args.get_int("turn-len")),
                answer, "turn", "prompt tokens", "cached", "TTFT cold (s)", "TTFT cached (s)");
    EngineOptions cached_opt = base, cold_opt = base;
    cold_opt.prefix_cache = false;
    auto cached_engine = engine::make_engine(model, cached_opt);
    auto cold_engine = engine::make_engine(model, cold_opt);
    std::vector<int32_t> conversation = random_ids(rng, args.get_int("system-len"), vocab);
    for (int64_t turn = 1; turn <= turns; ++turn) {
      auto user = random_ids(rng, args.get_int("turn-len"), vocab);
      conversation.insert(conversation.end(), user.begin(), user.end());
      RequestSpec s = fixed_length_greedy(conversation, answer);
      auto cold = run_batch(*cold_engine, {s});
      auto warm = run_batch(*cached_engine, {s});
      const double tc = since(cold[0].submitted, cold[0].first), tw = since(warm[0].submitted, warm[0].first);
      std::printf("%6lld %14zu %14lld %14.3f %16.3f\n", static_cast<long long>(turn), conversation.size(),
                  static_cast<long long>(warm[0].cached), tc, tw);
      csv << turn << "," << conversation.size() << "," << warm[0].cached << "," << tc << "," << tw << "\n";
      // The answer joins the conversation, as a chat client would send it back next turn.
      const std::vector<int32_t>& answer_ids = warm[0].ids;
      conversation.insert(conversation.end(), answer_ids.begin(), answer_ids.end());
    }
    csv.close();
    std::printf("\n");
    plot(out_dir, "ttft", "time to first token over a multi-turn conversation", "turn", "seconds",
         "'" + out_dir + "/ttft.csv' every ::1 using 1:4 with linespoints title 'cold', '" + out_dir +
             "/ttft.csv' every ::1 using 1:5 with linespoints title 'cached prefix'",
         false);
  }
  std::printf("CSV and plots in %s\n", out_dir.c_str());
  return 0;
#endif
}

}  // namespace
DSINFER_COMMAND("bench-serve", "serving benchmarks: prefill/decode curves, multi-turn TTFT, overlap, speculation",
                run_bench_serve);
}  // namespace dsinfer::cli
