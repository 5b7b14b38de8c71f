// dsinfer generate: offline generation through the serving engine (continuous batching, prefix cache,
// deterministic sampling, optional MTP speculation).
//   one prompt:   --prompt-ids 1,2,3  prints the generated ids (comma-separated) as they come
//   many prompts: --prompts FILE.jsonl, one request per line:
//                 {"prompt_ids": [...] | "prompt": "text", "max_tokens": n, "temperature": t, "top_p": p,
//                  "top_k": k, "min_p": m, "seed": s, "stop_token_ids": [...], "ignore_eos": b}
//                 prints one line per input, in input order:
//                 {"output_ids": [...], "finish_reason": "stop|length|cancelled|error", "cached_tokens": n}
//                 ("text" too when the prompt was text). With --max-concurrency 1 the requests run one
//                 after another, so a repeated prompt hits the prefix cache.
// output_ids end with the stop token when a request stopped on one (EOS or stop_token_ids).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/common_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/offline.h"
#include "tokenizer/tokenizer.h"
#ifdef DSINFER_ENGINE_HAVE_V4
#include "engine/deepseek_v4/v4_runner.h"
#endif

namespace dsinfer::cli {
namespace {

int run_generate(int argc, char** argv) {
  Args args("generate",
            "Generate tokens through the serving engine (DeepSeek-V4 or V4.1 checkpoints): one prompt (--prompt-ids, "
            "ids printed as they come) or many (--prompts FILE.jsonl, one JSON result per input line, in input "
            "order).");
  add_model_flags(args, NumericsDefault::kFast);
  args.option("prompt-ids", "IDS", "comma-separated prompt token ids (one prompt)");
  args.option("prompts", "FILE",
              "JSONL, one request per line: prompt_ids or prompt (text, needs DIR/tokenizer.json), max_tokens, "
              "temperature, top_p, top_k, min_p, seed, stop_token_ids, ignore_eos");
  args.option("output", "FILE", "write the JSONL results here instead of stdout");
  args.option("max-concurrency", "N", "requests in flight at once (1: one after another)", "16");
  args.option("max-tokens", "N", "tokens to generate (default for JSONL lines)", "32");
  args.option("temperature", "T", "sampling temperature (0: greedy)", "0");
  args.option("top-p", "P", "nucleus sampling threshold", "1");
  args.option("top-k", "K", "keep the K most likely tokens (0: off)", "0");
  args.option("min-p", "P", "drop tokens below P times the most likely one's probability", "0");
  args.option("seed", "S", "sampling seed", "0");
  args.flag("ignore-eos", "keep generating after the end-of-sequence token");
  args.flag("no-overlap", "plan each step only after the previous one finished");
  // --max-running defaults to --max-concurrency, --max-queue to the number of requests.
  add_engine_flags(args);
  add_kv_store_flags(args, "off");
  if (!args.parse(argc, argv)) return args.exit_code();
#ifndef DSINFER_ENGINE_HAVE_V4
  std::fprintf(stderr, "dsinfer generate: this build has no DeepSeek-V4 model library\n");
  return 1;
#else
  DSINFER_CHECK(args.has("prompt-ids") != args.has("prompts"), "give exactly one of --prompt-ids and --prompts");
  const ModelFlags model_flags = read_model_flags(args);
  const EngineFlags engine_flags = read_engine_flags(args);
  const std::string model_dir = model_flags.dir;

  engine::RequestSpec defaults;
  defaults.max_tokens = static_cast<int32_t>(args.get_int("max-tokens"));
  defaults.sampling.temperature = static_cast<float>(args.get_double("temperature"));
  defaults.sampling.top_p = static_cast<float>(args.get_double("top-p"));
  defaults.sampling.top_k = static_cast<int32_t>(args.get_int("top-k"));
  defaults.sampling.min_p = static_cast<float>(args.get_double("min-p"));
  defaults.sampling.seed = static_cast<uint64_t>(args.get_int("seed"));
  defaults.ignore_eos = args.has("ignore-eos");

  std::unique_ptr<tokenizer::Tokenizer> tok;
  auto tokenize = [&](const std::string& text) {
    if (!tok) {
      const std::string path = model_dir + "/tokenizer.json";
      DSINFER_CHECK(std::filesystem::is_regular_file(path), "a \"prompt\" text needs ", path,
                    "; give \"prompt_ids\" instead");
      tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(path));
    }
    return tok->encode(text);
  };

  std::vector<engine::RequestSpec> specs;
  std::vector<bool> is_text;
  const bool single = args.has("prompt-ids");
  if (single) {
    specs.push_back(defaults);
    specs.back().prompt_ids = parse_id_list(args.get("prompt-ids"));
    is_text.push_back(false);
  } else {
    const std::string path = args.get("prompts");
    std::ifstream in(path);
    DSINFER_CHECK(in.good(), "cannot read ", path);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      engine::OfflineRequest r = engine::parse_offline_request(line, core::str_cat(path, ":", n), defaults, tokenize);
      specs.push_back(std::move(r.spec));
      is_text.push_back(r.text);
    }
  }

  engine::V4RunnerOptions ro;
  ro.model.numerics.mode = model::deepseek_v4::parse_numerics_mode(model_flags.numerics);
  ro.model.numerics.kv_qdq = model_flags.kv_qdq;
  ro.model.threads = model_flags.threads;
  auto runner = engine::open_model(model_dir, ro);
  const int64_t concurrency = args.get_int("max-concurrency", 1, kMaxRunning);
  engine::EngineOptions eo;
  eo.kv_budget_bytes = engine_flags.kv_budget_bytes;
  eo.max_running = args.has("max-running") ? engine_flags.max_running : static_cast<int32_t>(concurrency);
  eo.max_queue = args.has("max-queue") ? engine_flags.max_queue
                                       : static_cast<int32_t>(std::min<size_t>(specs.size() + 1, kMaxQueue));
  eo.max_batch_tokens = engine_flags.max_batch_tokens;
  eo.prefix_cache = engine_flags.prefix_cache;
  eo.swa_replay = engine_flags.swa_replay;
  eo.decoder_replay_tokens = engine_flags.decoder_replay_tokens;
  eo.overlap_scheduling = !args.has("no-overlap");
  eo.speculation = engine_flags.speculation;
  eo.draft_tokens = engine_flags.draft_tokens;
  if (eo.prefix_cache) apply_kv_store_flags(read_kv_store_flags(args, ""), eo);
  auto engine = engine::make_engine(runner, eo);

  std::FILE* out = stdout;
  if (args.has("output")) {
    out = std::fopen(args.get("output").c_str(), "w");
    DSINFER_CHECK(out != nullptr, "cannot write ", args.get("output"));
  }
  std::mutex out_mu;
  size_t printed = 0;  // single prompt: ids printed so far
  int64_t prompt_tokens = 0, generated = 0, cached = 0;
  bool failed = false;
  for (const auto& s : specs) prompt_tokens += static_cast<int64_t>(s.prompt_ids.size());
  engine::OfflineCallbacks cb;
  if (single) {
    cb.on_tokens = [&](size_t, std::span<const int32_t> ids) {
      std::lock_guard<std::mutex> lock(out_mu);
      for (int32_t id : ids) std::fprintf(out, "%s%d", printed++ == 0 ? "" : ",", id);
      std::fflush(out);
    };
  }
  cb.on_result = [&](size_t i, const engine::OfflineResult& r) {
    std::lock_guard<std::mutex> lock(out_mu);
    generated += static_cast<int64_t>(r.output_ids.size());
    cached += r.cached_tokens;
    failed |= r.finish == engine::FinishReason::kError;
    if (single) {
      std::fprintf(out, "\n");
      if (!r.error.empty()) std::fprintf(stderr, "dsinfer generate: %s\n", r.error.c_str());
    } else {
      std::string text;
      if (is_text[i] && tok) text = tok->decode(r.output_ids);
      std::fprintf(out, "%s\n", engine::format_offline_result(r, is_text[i] && tok ? &text : nullptr).c_str());
    }
    std::fflush(out);
  };
  const auto t0 = std::chrono::steady_clock::now();
  engine::generate_offline(*engine, specs, concurrency, cb);
  engine->shutdown(true);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const engine::EngineMetrics m = engine->metrics();
  std::fprintf(stderr,
               "generate: %zu requests, %lld prompt tokens (%lld cached), %lld generated in %.3f s (%.1f tok/s); "
               "%lld steps",
               specs.size(), static_cast<long long>(prompt_tokens), static_cast<long long>(cached),
               static_cast<long long>(generated), secs, static_cast<double>(generated) / secs,
               static_cast<long long>(m.steps_total));
  if (m.draft_tokens_total > 0) {
    std::fprintf(stderr, "; drafts accepted %lld/%lld (%.1f%%)", static_cast<long long>(m.accepted_draft_tokens_total),
                 static_cast<long long>(m.draft_tokens_total),
                 100.0 * static_cast<double>(m.accepted_draft_tokens_total) / static_cast<double>(m.draft_tokens_total));
  }
  std::fprintf(stderr, "\n");
  if (out != stdout) std::fclose(out);
  return failed ? 1 : 0;
#endif
}

}  // namespace
DSINFER_COMMAND("generate", "generate tokens through the serving engine (one prompt or a JSONL file)", run_generate);
}  // namespace dsinfer::cli
