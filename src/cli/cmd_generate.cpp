// dsinfer generate: offline generation through the serving engine (continuous batching, prefix cache,
// deterministic sampling, optional MTP speculation).
//   one prompt:   --prompt-ids 1,2,3  prints the generated ids (comma-separated) as they come
//   many prompts: --prompts FILE.jsonl, one request per line:
//                 {"prompt_ids": [...] | "prompt": "text", "max_tokens": n, "temperature": t, "top_p": p,
//                  "top_k": k, "min_p": m, "seed": s, "stop_token_ids": [...], "ignore_eos": b}
//                 prints one line per input, in input order:
//                 {"output_ids": [...], "finish_reason": "stop|length|cancelled|error", "cached_tokens": n}
// output_ids end with the stop token when a request stopped on one (EOS or stop_token_ids).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"
#ifdef DSINFER_ENGINE_HAVE_V4
#include "engine/deepseek_v4/v4_runner.h"
#endif

namespace dsinfer::cli {
namespace {

using engine::FinishReason;
using engine::RequestSpec;
using engine::TokenEvent;

const char* finish_name(FinishReason f) {
  switch (f) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

struct Job {
  RequestSpec spec;
  bool text = false;  // the prompt was text: also print the decoded answer
  std::vector<int32_t> output;
  FinishReason finish = FinishReason::kNone;
  int64_t cached = 0;
  std::string error;
  bool done = false;
};

template <typename T>
T field(const nlohmann::json& j, const char* name, T fallback, const std::string& where) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const std::exception& e) {
    core::fail(where, ": field \"", name, "\" has the wrong type (", e.what(), ")");
  }
}

// Parses one JSONL line into a request; defaults come from the command-line flags.
Job parse_job(const std::string& line, const std::string& where, const RequestSpec& defaults,
              const std::function<const tokenizer::Tokenizer&()>& tokenizer) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const std::exception& e) {
    core::fail(where, ": not valid JSON (", e.what(), ")");
  }
  DSINFER_CHECK(j.is_object(), where, ": expected a JSON object");
  Job job;
  job.spec = defaults;
  if (j.contains("prompt_ids")) {
    job.spec.prompt_ids = field<std::vector<int32_t>>(j, "prompt_ids", {}, where);
  } else if (j.contains("prompt")) {
    const std::string text = field<std::string>(j, "prompt", "", where);
    try {
      job.spec.prompt_ids = tokenizer().encode(text);
    } catch (const core::Error& e) {
      core::fail(where, ": ", e.what());
    }
    job.text = true;
  } else {
    core::fail(where, ": needs \"prompt_ids\" or \"prompt\"");
  }
  job.spec.max_tokens = field<int32_t>(j, "max_tokens", defaults.max_tokens, where);
  job.spec.sampling.temperature = field<float>(j, "temperature", defaults.sampling.temperature, where);
  job.spec.sampling.top_p = field<float>(j, "top_p", defaults.sampling.top_p, where);
  job.spec.sampling.top_k = field<int32_t>(j, "top_k", defaults.sampling.top_k, where);
  job.spec.sampling.min_p = field<float>(j, "min_p", defaults.sampling.min_p, where);
  job.spec.sampling.seed = field<uint64_t>(j, "seed", defaults.sampling.seed, where);
  job.spec.stop_token_ids = field<std::vector<int32_t>>(j, "stop_token_ids", defaults.stop_token_ids, where);
  job.spec.ignore_eos = field<bool>(j, "ignore_eos", defaults.ignore_eos, where);
  return job;
}

int run_generate(int argc, char** argv) {
  Args args("generate",
            "Generate tokens through the serving engine: one prompt (--prompt-ids, ids printed as they come) or "
            "many (--prompts FILE.jsonl, one JSON result per input line, in input order).");
  args.option("model", "DIR", "checkpoint directory");
  args.option("prompt-ids", "IDS", "comma-separated prompt token ids (one prompt)");
  args.option("prompts", "FILE", "JSONL file, one request per line (see the file header of cmd_generate.cpp)");
  args.option("output", "FILE", "write the JSONL results here instead of stdout");
  args.option("max-concurrency", "N", "requests in flight at once (1: one after another)", "16");
  args.option("max-tokens", "N", "tokens to generate (default for JSONL lines)", "32");
  args.option("temperature", "T", "sampling temperature (0: greedy)", "0");
  args.option("top-p", "P", "nucleus sampling threshold", "1");
  args.option("top-k", "K", "keep the K most likely tokens (0: off)", "0");
  args.option("min-p", "P", "drop tokens below P times the most likely one's probability", "0");
  args.option("seed", "S", "sampling seed", "0");
  args.flag("ignore-eos", "keep generating after the end-of-sequence token");
  args.option("chunk-size", "N", "tokens per forward step, prefill chunks included (0: engine default 2048)", "0");
  args.option("kv-budget-mib", "N", "KV memory budget of the engine", "4096");
  args.flag("no-prefix-cache", "do not reuse KV blocks across requests");
  args.flag("no-overlap", "plan each step only after the previous one finished");
  args.flag("speculation", "MTP speculative decoding (lossless)");
  args.option("numerics", "MODE", "exact or reference", "exact");
  args.flag("no-kv-qdq", "turn off the KV FP8 and indexer FP4 QDQ (diagnostic)");
  args.option("threads", "N", "worker threads (0: DSINFER_THREADS or all cores)", "0");
  if (!args.parse(argc, argv)) return args.exit_code();
#ifndef DSINFER_ENGINE_HAVE_V4
  std::fprintf(stderr, "dsinfer generate: this build has no DeepSeek-V4 model library\n");
  return 1;
#else
  DSINFER_CHECK(args.has("prompt-ids") != args.has("prompts"), "give exactly one of --prompt-ids and --prompts");
  const std::string model_dir = args.get("model");

  RequestSpec defaults;
  defaults.max_tokens = static_cast<int32_t>(args.get_int("max-tokens"));
  defaults.sampling.temperature = static_cast<float>(args.get_double("temperature"));
  defaults.sampling.top_p = static_cast<float>(args.get_double("top-p"));
  defaults.sampling.top_k = static_cast<int32_t>(args.get_int("top-k"));
  defaults.sampling.min_p = static_cast<float>(args.get_double("min-p"));
  defaults.sampling.seed = static_cast<uint64_t>(args.get_int("seed"));
  defaults.ignore_eos = args.has("ignore-eos");

  std::unique_ptr<tokenizer::Tokenizer> tok;
  auto get_tokenizer = [&]() -> const tokenizer::Tokenizer& {
    if (!tok) {
      const std::string path = model_dir + "/tokenizer.json";
      DSINFER_CHECK(std::filesystem::is_regular_file(path), "a \"prompt\" text needs ", path,
                    "; give \"prompt_ids\" instead");
      tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(path));
    }
    return *tok;
  };

  std::vector<Job> jobs;
  const bool single = args.has("prompt-ids");
  if (single) {
    Job j;
    j.spec = defaults;
    j.spec.prompt_ids = parse_id_list(args.get("prompt-ids"));
    jobs.push_back(std::move(j));
  } else {
    const std::string path = args.get("prompts");
    std::ifstream in(path);
    DSINFER_CHECK(in.good(), "cannot read ", path);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      jobs.push_back(parse_job(line, core::str_cat(path, ":", n), defaults, get_tokenizer));
    }
  }

  const int64_t concurrency = args.get_int("max-concurrency");
  DSINFER_CHECK(concurrency >= 1, "--max-concurrency must be >= 1");
  engine::V4RunnerOptions ro;
  ro.model.numerics.mode = model::deepseek_v4::parse_numerics_mode(args.get("numerics"));
  ro.model.numerics.kv_qdq = !args.has("no-kv-qdq");
  ro.model.threads = static_cast<int>(args.get_int("threads"));
  auto runner = engine::open_model(model_dir, ro);
  engine::EngineOptions eo;
  eo.kv_budget_bytes = args.get_int("kv-budget-mib") << 20;
  eo.max_running = static_cast<int32_t>(concurrency);
  eo.max_queue = static_cast<int32_t>(jobs.size() + 1);
  if (args.get_int("chunk-size") > 0) eo.max_batch_tokens = static_cast<int32_t>(args.get_int("chunk-size"));
  eo.prefix_cache = !args.has("no-prefix-cache");
  eo.overlap_scheduling = !args.has("no-overlap");
  eo.speculation = args.has("speculation");
  auto engine = engine::make_engine(runner, eo);

  std::FILE* out = stdout;
  if (args.has("output")) {
    out = std::fopen(args.get("output").c_str(), "w");
    DSINFER_CHECK(out != nullptr, "cannot write ", args.get("output"));
  }

  std::mutex mu;
  std::condition_variable cv;
  size_t next_submit = 0, next_print = 0, in_flight = 0;
  int64_t prompt_tokens = 0, generated = 0, cached = 0;
  for (const Job& j : jobs) prompt_tokens += static_cast<int64_t>(j.spec.prompt_ids.size());
  const auto t0 = std::chrono::steady_clock::now();

  auto print_ready = [&] {  // with mu held: results go out in input order as soon as they can
    while (next_print < jobs.size() && jobs[next_print].done) {
      Job& j = jobs[next_print++];
      if (single) {
        std::fprintf(out, "\n");
        continue;
      }
      nlohmann::ordered_json r;
      r["output_ids"] = j.output;
      r["finish_reason"] = finish_name(j.finish);
      r["cached_tokens"] = j.cached;
      if (j.text && tok) r["text"] = tok->decode(j.output);
      if (!j.error.empty()) r["error"] = j.error;
      std::fprintf(out, "%s\n", r.dump().c_str());
    }
    std::fflush(out);
  };

  std::unique_lock<std::mutex> lock(mu);
  while (next_print < jobs.size()) {
    while (next_submit < jobs.size() && in_flight < static_cast<size_t>(concurrency)) {
      const size_t i = next_submit++;
      ++in_flight;
      auto callback = [&, i](const TokenEvent& e) {
        std::lock_guard<std::mutex> l(mu);
        Job& j = jobs[i];
        j.output.insert(j.output.end(), e.tokens.begin(), e.tokens.end());
        generated += static_cast<int64_t>(e.tokens.size());
        if (single && !e.tokens.empty()) {
          for (size_t k = 0; k < e.tokens.size(); ++k) {
            std::fprintf(out, "%s%d", j.output.size() == e.tokens.size() && k == 0 ? "" : ",", e.tokens[k]);
          }
          std::fflush(out);
        }
        if (e.finish == FinishReason::kNone) return;
        if (e.matched_stop_token >= 0) {
          j.output.push_back(e.matched_stop_token);
          ++generated;
          if (single) std::fprintf(out, "%s%d", j.output.size() == 1 ? "" : ",", e.matched_stop_token);
        }
        j.finish = e.finish;
        j.cached = e.cached_tokens;
        j.error = e.error;
        j.done = true;
        cached += e.cached_tokens;
        --in_flight;
        cv.notify_all();
      };
      lock.unlock();
      engine::SubmitResult r = engine->submit(jobs[i].spec, callback);
      lock.lock();
      if (r.status != engine::SubmitStatus::kAccepted) {
        Job& j = jobs[i];
        j.finish = FinishReason::kError;
        j.error = r.message;
        j.done = true;
        --in_flight;
        DSINFER_CHECK(!single, r.message);
      }
    }
    print_ready();
    if (next_print < jobs.size()) cv.wait(lock);
  }
  lock.unlock();
  engine->shutdown(true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const engine::EngineMetrics m = engine->metrics();
  std::fprintf(stderr,
               "generate: %zu requests, %lld prompt tokens (%lld cached), %lld generated in %.3f s (%.1f tok/s); "
               "%lld steps",
               jobs.size(), static_cast<long long>(prompt_tokens), static_cast<long long>(cached),
               static_cast<long long>(generated), secs, static_cast<double>(generated) / secs,
               static_cast<long long>(m.steps_total));
  if (m.draft_tokens_total > 0) {
    std::fprintf(stderr, "; drafts accepted %lld/%lld (%.1f%%)", static_cast<long long>(m.accepted_draft_tokens_total),
                 static_cast<long long>(m.draft_tokens_total),
                 100.0 * static_cast<double>(m.accepted_draft_tokens_total) / static_cast<double>(m.draft_tokens_total));
  }
  std::fprintf(stderr, "\n");
  if (out != stdout) std::fclose(out);
  for (const Job& j : jobs) {
    if (j.finish == FinishReason::kError) return 1;
  }
  return 0;
#endif
}

}  // namespace
DSINFER_COMMAND("generate", "generate tokens through the serving engine (one prompt or a JSONL file)", run_generate);
}  // namespace dsinfer::cli
