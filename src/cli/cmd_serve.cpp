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
#include <memory>
#include <span>
#include <vector>

#include "cli/api_server_flags.h"
#include "cli/args.h"
#include "cli/command.h"
#include "cli/common_flags.h"
#include "cli/progress.h"
#include "core/error.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/config.h"
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
#include "server/structured_output.h"
#include "recipe/tokenizer_loader.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

namespace fs = std::filesystem;

int run_serve(int argc, char** argv) {
  Args args("serve",
            "Serve a DeepSeek-V4 or V4.1 checkpoint (by config.json's architectures[0]) over HTTP: OpenAI Chat\n"
            "Completions, Responses and Completions,\n"
            "Anthropic Messages, streaming (SSE) and not. Without --model it serves the embedded tiny model,\n"
            "generated on first use under ${DSINFER_HOME:-$HOME/.cache/dsinfer}/models/. Stops cleanly on\n"
            "SIGINT/SIGTERM (a second signal cancels what is still running).");
  add_model_flags(args, NumericsDefault::kFast,
                  "checkpoint directory (config.json, *.safetensors, tokenizer.json; default: the embedded tiny "
                  "model)");
  add_api_server_flags(args,
                       "require this key on /v1/* as 'Authorization: Bearer KEY' or 'x-api-key: KEY' (also from "
                       "$DSINFER_API_KEY)");
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

  const ApiServerFlags api_flags = read_api_server_flags(args, "dsinfer serve");
  server::ApiServerOptions opt = api_flags.options;
  const auto drain = api_flags.drain;
  const std::string role = args.get("role");
  DSINFER_CHECK(role == "colocated" || role == "prefill" || role == "decode",
                "dsinfer serve: --role must be colocated, prefill or decode, got '", role, "'");
  const bool worker_role = role != "colocated";
  DSINFER_CHECK(!worker_role || args.has("router"), "dsinfer serve: --role ", role, " needs --router URL");
  DSINFER_CHECK(worker_role || (!args.has("router") && !args.has("ucx-port") && !args.has("advertise-host")),
                "dsinfer serve: --router, --advertise-host and --ucx-port are for --role prefill|decode");
  [[maybe_unused]] const int64_t ucx_port = args.get_int("ucx-port", 0, 65535);
  const std::string ucx_address = args.get("ucx-address");
  DSINFER_CHECK(ucx_address == "listener" || ucx_address == "worker",
                "dsinfer serve: --ucx-address must be listener or worker, got '", ucx_address, "'");
  const auto handoff_timeout = seconds_flag(args, "handoff-timeout", "dsinfer serve");
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
  eopt.decoder_replay_tokens = engine_flags.decoder_replay_tokens;
  // A worker's requests export or import their state, which the engine keeps exact: the replay would
  // never run there.
  DSINFER_CHECK(!worker_role || eopt.decoder_replay_tokens == 0, "dsinfer serve: --decoder-replay is for --role ",
                "colocated (a disaggregated worker's states are handed over, and a replayed state cannot be)");
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
    default_name = model_dir_name(model_dir);
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
  opt.model_names = served_model_names(args, default_name);
  const model::ModelConfig config = model::ModelConfig::load(model_dir + "/config.json");
  resolve_prompt_version(args, config, opt);

#if !DSINFER_ENGINE_HAVE_V4
  core::fail("dsinfer serve: this build has no DeepSeek-V4 engine (src/engine/deepseek_v4)");
#else
  const auto t0 = std::chrono::steady_clock::now();
  // Checked for the template's control tokens now: a wrong tokenizer.json stops the start, naming them.
  const std::unique_ptr<tokenizer::Tokenizer> tok_owner =
      recipe::load_prompt_tokenizer(model_tokenizer_path(model_dir, config, "serve"), opt.prompt_version);
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
    // Structured output through a router: the constraint's source comes with each request and is
    // compiled here (cached by kind and source) over this process's tokenizer.
    auto structured = std::make_shared<server::StructuredOutput>(tok, eng->eos_token_id());
    wopt.make_constraint = [structured](const std::string& source) {
      return structured->constraint_from_source(source);
    };
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
