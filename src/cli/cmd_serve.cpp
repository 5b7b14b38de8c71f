// dsinfer serve: the OpenAI- and Anthropic-compatible HTTP server. With no --model it serves the
// embedded default (the tiny DeepSeek-V4 model with the V4 tokenizer, generated once and cached).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <span>
#include <vector>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/common_flags.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#if DSINFER_ENGINE_HAVE_V4
#include "engine/deepseek_v4/v4_runner.h"
#endif
#if DSINFER_HAVE_DISAGG
#include "disagg/sequence_handoff.h"
#include "disagg/worker.h"
#endif
#include "server/api_server.h"
#include "server/default_model.h"
#include "server/serve_signals.h"
#include "recipe/tokenizer_loader.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Bounded so that the conversion to milliseconds cannot overflow (a million seconds is 11 days).
std::chrono::milliseconds seconds_flag(const Args& args, const char* name) {
  const double s = args.get_double(name);
  DSINFER_CHECK(s > 0 && s <= 1e6, "dsinfer serve: --", name, " must be in (0, 1000000] seconds, got ", s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

constexpr int64_t kInt32Max = INT32_MAX;

[[maybe_unused]] std::string tokenizer_path_for(const std::string& model_dir) {
  const fs::path own = fs::path(model_dir) / "tokenizer.json";
  if (fs::is_regular_file(own)) return own.string();
  DSINFER_LOG_WARN("serve: ", model_dir, " has no tokenizer.json; using the V4 tokenizer");
  return (fs::path(server::ensure_v4_tokenizer_dir()) / "tokenizer.json").string();
}

int run_serve(int argc, char** argv) {
  Args args("serve",
            "Serve a DeepSeek-V4 checkpoint over HTTP: OpenAI Chat Completions, Responses and Completions,\n"
            "Anthropic Messages, streaming (SSE) and not. Without --model it serves the embedded tiny model,\n"
            "generated on first use under ${DSINFER_HOME:-$HOME/.cache/dsinfer}/models/. Stops cleanly on\n"
            "SIGINT/SIGTERM (a second signal cancels what is still running).");
  add_model_flags(args, "checkpoint directory (config.json, *.safetensors, tokenizer.json; default: the embedded tiny "
                        "model)");
  args.option("served-model-name", "NAMES",
              "comma-separated names that requests may give as \"model\"; the first is listed by /v1/models",
              "dsinfer-tiny, or the model directory's name");
  args.option("host", "ADDR", "address to listen on (0.0.0.0 for every interface)", "127.0.0.1");
  args.option("port", "N", "TCP port (0 picks a free one; the ready line tells which)", "8000");
  args.option("api-key", "KEY",
              "require this key on /v1/* as 'Authorization: Bearer KEY' or 'x-api-key: KEY' (also from "
              "$DSINFER_API_KEY)");
  args.option("max-body-bytes", "N", "largest request body; larger ones get 413", "8388608");
  args.option("max-header-bytes", "N", "largest request head; larger ones get 431", "16384");
  args.option("max-prompt-tokens", "N", "longest prompt in tokens (0: what the context allows)", "0");
  args.option("max-tokens", "N", "cap on a request's max_tokens; explicit larger values get 400 (0: the context)", "0");
  args.option("max-concurrent-requests", "N", "generation requests in flight; beyond it 429 with Retry-After", "1024");
  args.option("max-connections", "N", "open connections; beyond it new ones get 503", "16384");
  args.option("retry-after", "SECONDS", "Retry-After sent with 429", "1");
  args.option("header-timeout", "SECONDS", "time for a request's head to arrive once it started (slow clients get 408)",
              "10");
  args.option("body-timeout", "SECONDS", "time for a request's body to arrive after its head", "60");
  args.option("idle-timeout", "SECONDS", "keep-alive connections idle this long are closed", "60");
  args.option("write-timeout", "SECONDS", "a client that reads nothing for this long is dropped (its request cancelled)",
              "60");
  args.option("shutdown-timeout", "SECONDS", "on SIGINT/SIGTERM, time in-flight requests get to finish", "30");
  args.option("io-threads", "N", "threads for network I/O and streaming output", "2");
  args.option("prep-threads", "N", "threads that convert, render and encode incoming requests", "2");
  args.option("prompt-version", "v4|v41", "prompt template: V4 or V4.1", "v4");
  args.flag("no-thinking", "requests that do not choose get thinking mode off (default: on, as deepseek-recipe)");
  args.flag("deepseek-usage-chunk",
            "streamed Chat Completions carry usage on the finish chunk, always (DeepSeek's API); default: OpenAI's "
            "separate last chunk with \"choices\":[], only with stream_options.include_usage");
  args.option("responses-store-ttl", "SECONDS",
              "Responses API: how long a stored response (store: true, the default) can be continued with "
              "previous_response_id or read with GET /v1/responses/{id}",
              "3600");
  args.option("responses-store-bytes", "N",
              "Responses API: memory for stored responses; beyond it the least recently used go (0: store none)",
              "268435456");
  args.option("role", "colocated|prefill|decode",
              "colocated: serve requests whole (the default). prefill / decode: a worker of a disaggregated "
              "cluster (needs --router): it serves /internal/v1/ for the router, registers and heartbeats "
              "(src/disagg/README.md, Roles and protocol)",
              "colocated");
  args.option("router", "URL", "the router a prefill/decode worker heartbeats to, e.g. http://127.0.0.1:9000");
  args.option("advertise-host", "HOST",
              "prefill/decode: the host the router and peers reach this worker at (its URL and UCX address; "
              "default: --host)");
  args.option("ucx-port", "N", "prefill/decode: TCP port of the UCX listener (0 picks a free one)", "0");
  args.option("ucx-address", "listener|worker",
              "prefill/decode: the UCX address advertised: the listener's host:port (network transports, "
              "peer-failure detection) or the UCX worker address (every transport; needed for UCX_TLS=shm)",
              "listener");
  args.option("handoff-timeout", "SECONDS",
              "prefill/decode: a KV state nobody claims is freed after this long; a decode request waits this "
              "long for its state",
              "30");
  add_engine_flags(args);
  add_kv_store_flags(args, "${DSINFER_HOME:-$HOME/.cache/dsinfer}/kvstore");
  if (!args.parse(argc, argv)) return args.exit_code();
  const ModelFlags model_flags = read_model_flags(args, /*required=*/false);
  const EngineFlags engine_flags = read_engine_flags(args);

  // Signals are taken by signal_watch only; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  server::ServeSignals signal_watch(signals);

  server::ApiServerOptions opt;
  opt.host = args.get("host");
  const int64_t port = args.get_int("port");
  DSINFER_CHECK(port >= 0 && port <= 65535, "dsinfer serve: --port must be in [0, 65535], got ", port);
  opt.port = static_cast<uint16_t>(port);
  const char* env_key = std::getenv("DSINFER_API_KEY");
  if (auto key = args.get_optional("api-key")) opt.api_key = *key;
  else if (env_key) opt.api_key = env_key;
  if (args.has("api-key") || env_key) {  // a key that was meant to be set must be one a client can send
    const std::string problem = server::api_key_problem(opt.api_key);
    DSINFER_CHECK(problem.empty(), "dsinfer serve: ", args.has("api-key") ? "--api-key" : "$DSINFER_API_KEY", " ",
                  problem);
  }
  opt.http.max_body_bytes = static_cast<size_t>(args.get_int("max-body-bytes", 1, int64_t{1} << 36));
  opt.http.max_header_bytes = static_cast<size_t>(args.get_int("max-header-bytes", 1024, int64_t{1} << 24));
  opt.http.max_connections = static_cast<size_t>(args.get_int("max-connections", 1, int64_t{1} << 24));
  opt.http.header_timeout = seconds_flag(args, "header-timeout");
  opt.http.body_timeout = seconds_flag(args, "body-timeout");
  opt.http.idle_timeout = seconds_flag(args, "idle-timeout");
  opt.http.write_timeout = seconds_flag(args, "write-timeout");
  opt.max_prompt_tokens = args.get_int("max-prompt-tokens", 0, kInt32Max);
  opt.max_output_tokens = args.get_int("max-tokens", 0, kInt32Max);
  opt.max_concurrent_requests = static_cast<int>(args.get_int("max-concurrent-requests", 1, int64_t{1} << 24));
  opt.retry_after_seconds = static_cast<int>(args.get_int("retry-after", 0, 86400));
  opt.io_threads = static_cast<int>(args.get_int("io-threads", 1, 1024));
  opt.prep_threads = static_cast<int>(args.get_int("prep-threads", 1, 1024));
  const std::string pv = args.get("prompt-version");
  DSINFER_CHECK(pv == "v4" || pv == "v41" || pv == "v4.1", "dsinfer serve: --prompt-version must be v4 or v41, got '",
                pv, "'");
  opt.prompt_version = pv == "v4" ? recipe::PromptVersion::kV4 : recipe::PromptVersion::kV41;
  opt.conversion.default_thinking_mode = !args.has("no-thinking");
  opt.separate_usage_chunk = !args.has("deepseek-usage-chunk");
  opt.responses_store_ttl = seconds_flag(args, "responses-store-ttl");
  opt.responses_store_bytes = args.get_int("responses-store-bytes", 0, int64_t{1} << 40);
  const auto drain = seconds_flag(args, "shutdown-timeout");
  const std::string role = args.get("role");
  DSINFER_CHECK(role == "colocated" || role == "prefill" || role == "decode",
                "dsinfer serve: --role must be colocated, prefill or decode, got '", role, "'");
  const bool worker_role = role != "colocated";
  DSINFER_CHECK(!worker_role || args.has("router"), "dsinfer serve: --role ", role, " needs --router URL");
  DSINFER_CHECK(worker_role || (!args.has("router") && !args.has("ucx-port") && !args.has("advertise-host")),
                "dsinfer serve: --router, --advertise-host and --ucx-port are for --role prefill|decode");
  const int64_t ucx_port = args.get_int("ucx-port", 0, 65535);
  const std::string ucx_address = args.get("ucx-address");
  DSINFER_CHECK(ucx_address == "listener" || ucx_address == "worker",
                "dsinfer serve: --ucx-address must be listener or worker, got '", ucx_address, "'");
  const auto handoff_timeout = seconds_flag(args, "handoff-timeout");
#if !DSINFER_HAVE_DISAGG
  DSINFER_CHECK(!worker_role, "dsinfer serve: --role ", role,
                " needs the disagg part, which this build lacks (libucx-dev was not found)");
#endif

  engine::EngineOptions eopt;
  eopt.kv_budget_bytes = engine_flags.kv_budget_bytes;
  eopt.max_batch_tokens = engine_flags.max_batch_tokens;
  eopt.max_running = engine_flags.max_running;
  eopt.max_queue = engine_flags.max_queue;
  eopt.prefix_cache = engine_flags.prefix_cache;
  opt.share_prompt_kv = engine_flags.prefix_cache;  // n > 1 shares the prompt through the cache
  eopt.swa_replay = engine_flags.swa_replay;
  eopt.speculation = engine_flags.speculation;
  eopt.draft_tokens = engine_flags.draft_tokens;
  const KvStoreFlags kv_flags = read_kv_store_flags(args, server::dsinfer_home() + "/kvstore");
  if (engine_flags.prefix_cache) apply_kv_store_flags(kv_flags, eopt);

  // The model: the one given, or the embedded default (generated on first use).
  std::string model_dir;
  std::string default_name;
  if (!model_flags.dir.empty()) {
    model_dir = model_flags.dir;
    DSINFER_CHECK(fs::is_directory(model_dir), "dsinfer serve: --model ", model_dir, " is not a directory");
    default_name = fs::path(model_dir).lexically_normal().filename().string();
    if (default_name.empty() || default_name == ".")
      default_name = fs::path(model_dir).lexically_normal().parent_path().filename().string();
  } else {
    default_name = server::kDefaultModelName;
    const std::string dir = server::default_model_dir();
    std::printf("dsinfer serve: using the embedded tiny model (%s)\n", dir.c_str());
    std::fflush(stdout);
    ProgressBar bar("generating the tiny model");
    const auto made = server::ensure_default_model([&](uint64_t done, uint64_t total) { bar.update(done, total); });
    bar.finish();
    if (made.created) std::printf("dsinfer serve: generated the tiny model in %s\n", made.dir.c_str());
    model_dir = made.dir;
  }
  opt.model_names = split_names(args.get_optional("served-model-name").value_or(""));
  if (!args.has("served-model-name") || opt.model_names.empty()) opt.model_names = {default_name};

#if !DSINFER_ENGINE_HAVE_V4
  core::fail("dsinfer serve: this build has no DeepSeek-V4 engine (src/engine/deepseek_v4)");
#else
  const auto t0 = std::chrono::steady_clock::now();
  // Checked for the template's control tokens now: a wrong tokenizer.json stops the start, naming them.
  const std::unique_ptr<tokenizer::Tokenizer> tok_owner =
      recipe::load_prompt_tokenizer(tokenizer_path_for(model_dir), opt.prompt_version);
  const tokenizer::Tokenizer& tok = *tok_owner;
  std::unique_ptr<engine::Engine> eng;
  engine::ModelInfo model_info;
  {
    // The model reports blocks loaded; the bar shows them as a share of the checkpoint's bytes.
    uint64_t checkpoint_bytes = 0;
    for (const auto& e : fs::directory_iterator(model_dir))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") checkpoint_bytes += e.file_size();
    ProgressBar bar("loading " + model_dir);
    engine::V4RunnerOptions ropt;
    ropt.model.threads = model_flags.threads;
    ropt.model.numerics.mode = model::deepseek_v4::parse_numerics_mode(model_flags.numerics);
    ropt.model.numerics.kv_qdq = model_flags.kv_qdq;
    ropt.model.progress = [&](int64_t done, int64_t total) {
      if (total <= 0) return;
      const uint64_t t = checkpoint_bytes > 0 ? checkpoint_bytes : static_cast<uint64_t>(total);
      bar.update(t * static_cast<uint64_t>(done) / static_cast<uint64_t>(total), t);
    };
#if DSINFER_HAVE_DISAGG
    if (worker_role) {
      ropt.sequence_codec.save = [](const model::deepseek_v4::SequenceState& state, std::span<const float> hidden) {
        return disagg::export_sequence(state, hidden);
      };
      ropt.sequence_codec.load = [](const model::deepseek_v4::Model& m, std::span<const uint8_t> bytes,
                                    std::vector<float>& hidden) {
        disagg::ImportedSequence imported = disagg::import_sequence(m, bytes);
        hidden = std::move(imported.last_hidden);
        return std::move(imported.state);
      };
    }
#endif
    auto runner = engine::open_model(model_dir, ropt);
    bar.finish();
    // A prefill worker feeds the MTP block whether or not it drafts itself: the state it hands over then
    // carries the MTP ring and last streams a drafting decode worker needs.
    if (role == "prefill" && runner->info().max_draft_tokens > 0) runner->prepare(true, eopt.batch_invariant);
    model_info = runner->info();
    eng = engine::make_engine(std::move(runner), eopt);
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

#if DSINFER_HAVE_DISAGG
  // A worker's /internal/v1/ routes need the worker, which needs the HTTP port: the route handler
  // forwards to it once it exists (a request arriving before is told the worker is not ready).
  std::shared_ptr<disagg::Worker> worker;
  std::atomic<disagg::Worker*> worker_ptr{nullptr};
  if (worker_role) {
    opt.internal_routes = [&worker_ptr](std::shared_ptr<server::Exchange> ex) {
      if (disagg::Worker* w = worker_ptr.load()) return w->handle(ex);
      ex->respond(503, "application/json", R"({"error":{"message":"the worker is starting","type":"server_error"}})");
    };
    opt.extra_metrics = [&worker_ptr](server::PromWriter& w) {
      if (disagg::Worker* wk = worker_ptr.load()) wk->write_metrics(w);
    };
  }
#endif
  server::ApiServer api(opt, *eng, tok);
  api.start();
#if DSINFER_HAVE_DISAGG
  if (worker_role) {
    disagg::WorkerOptions wopt;
    wopt.role = role == "prefill" ? disagg::WorkerRole::kPrefill : disagg::WorkerRole::kDecode;
    wopt.router_url = args.get("router");
    wopt.advertise_host = args.get_optional("advertise-host").value_or(opt.host);
    DSINFER_CHECK(wopt.advertise_host != "0.0.0.0" && wopt.advertise_host != "::",
                  "dsinfer serve: peers cannot reach ", wopt.advertise_host, ": give --advertise-host");
    wopt.http_port = api.port();
    wopt.api_key = opt.api_key;
    wopt.transport.listen_host = wopt.advertise_host;
    wopt.transport.listen_port = static_cast<uint16_t>(ucx_port);
    wopt.transport.advertise_worker_address = ucx_address == "worker";
    wopt.handoff_timeout = handoff_timeout;
    wopt.max_running = eopt.max_running;
    const int64_t per_token = std::max<int64_t>(1, model_info.block_bytes / std::max(1, model_info.block_tokens));
    wopt.kv_bytes_per_token = per_token;
    wopt.kv_tokens = eopt.kv_budget_bytes / per_token;
    worker = std::make_shared<disagg::Worker>(std::move(wopt), *eng);
    worker_ptr.store(worker.get());
    std::printf("dsinfer serve: %s worker %s, UCX address %s, heartbeats to %s\n", role.c_str(),
                worker->id().c_str(), worker->ucx_address().c_str(), args.get("router").c_str());
  }
#endif
  std::printf("dsinfer serve: model \"%s\" from %s loaded in %.1f s (context %lld tokens)\n",
              opt.model_names.front().c_str(), model_dir.c_str(), load_s,
              static_cast<long long>(eng->max_context()));
  std::printf("dsinfer serve: listening on http://%s:%u (OpenAI: /v1/chat/completions /v1/responses "
              "/v1/completions, Anthropic: /v1/messages)%s\n",
              opt.host.find(':') != std::string::npos ? ("[" + opt.host + "]").c_str() : opt.host.c_str(),
              static_cast<unsigned>(api.port()), opt.api_key.empty() ? "" : ", API key required");
  signal_watch.serving([&api] { api.cancel_in_flight(); });
  std::printf("dsinfer serve: ready\n");
  std::fflush(stdout);

  const int sig = signal_watch.wait_first();
  std::printf("dsinfer serve: %s received, finishing in-flight requests (up to %.0f s; again to cancel them)\n",
              sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<double>(drain.count()) / 1000.0);
  std::fflush(stdout);
  api.shutdown(drain);  // a second signal cuts the drain short
#if DSINFER_HAVE_DISAGG
  if (worker) worker->stop();
#endif
  eng.reset();
  signal_watch.finish();
  std::printf("dsinfer serve: stopped\n");
  return 0;
#endif
}

}  // namespace
DSINFER_COMMAND("serve", "serve a model over HTTP (OpenAI and Anthropic APIs)", run_serve);
}  // namespace dsinfer::cli
