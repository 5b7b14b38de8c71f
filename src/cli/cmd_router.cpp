// dsinfer router: the client-facing server of a disaggregated cluster. The same OpenAI/Anthropic API as
// `dsinfer serve` (the server and recipe layers run here: rendering and tokenization happen once, at the
// router) over a RemoteEngine that sends every request to a prefill worker and a decode worker
// (`dsinfer serve --role prefill|decode --router URL`). It reads only the model's config.json and
// tokenizer.json, never its weights.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/api_server_flags.h"
#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "recipe/tokenizer_loader.h"
#include "router/remote_engine.h"
#include "server/api_errors.h"
#include "server/api_server.h"
#include "server/default_model.h"
#include "server/serve_signals.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCommand = "dsinfer router";

// The router's own gauges and counters (src/router/README.md "Metrics").
void write_router_metrics(const router::RouterStats& s, server::PromWriter& w) {
  w.family("dsinfer_router_worker_live", "gauge", "1 while the worker holds its lease.");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_live", {{"worker", x.id}, {"role", x.prefill ? "prefill" : "decode"}}, x.live);
  w.family("dsinfer_router_worker_running", "gauge", "Requests running on the worker (its last heartbeat).");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_running", {{"worker", x.id}}, static_cast<double>(x.running));
  w.family("dsinfer_router_worker_waiting", "gauge", "Requests waiting on the worker (its last heartbeat).");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_waiting", {{"worker", x.id}}, static_cast<double>(x.waiting));
  w.family("dsinfer_router_worker_kv_tokens_used", "gauge", "KV tokens in use on the worker (its last heartbeat).");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_kv_tokens_used", {{"worker", x.id}}, static_cast<double>(x.kv_tokens_used));
  w.family("dsinfer_router_worker_kv_tokens", "gauge", "KV token capacity of the worker.");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_kv_tokens", {{"worker", x.id}}, static_cast<double>(x.kv_tokens));
  w.family("dsinfer_router_worker_routed_requests", "gauge", "This router's requests on the worker now.");
  for (const auto& x : s.workers)
    w.sample("dsinfer_router_worker_routed_requests", {{"worker", x.id}}, static_cast<double>(x.routed_in_flight));
  w.family("dsinfer_router_prefill_queue", "gauge", "Requests waiting for a prefill worker, by prompt-length bucket.");
  for (size_t b = 0; b < s.bucket_queued.size(); ++b) {
    const std::string lo = b == 0 ? "0" : std::to_string(s.bucket_bounds[b - 1]);
    const std::string hi = b < s.bucket_bounds.size() ? std::to_string(s.bucket_bounds[b]) : "+Inf";
    w.sample("dsinfer_router_prefill_queue", {{"bucket", lo + "-" + hi}}, static_cast<double>(s.bucket_queued[b]));
  }
  w.family("dsinfer_router_imbalance", "gauge",
           "max/mean load over live workers: decode requests, decode KV tokens, prefill tokens in flight.");
  w.sample("dsinfer_router_imbalance", {{"of", "decode_requests"}}, s.decode_request_imbalance);
  w.sample("dsinfer_router_imbalance", {{"of", "decode_kv"}}, s.decode_kv_imbalance);
  w.sample("dsinfer_router_imbalance", {{"of", "prefill_tokens"}}, s.prefill_imbalance);
  w.counter("dsinfer_router_failovers_total", "Requests re-submitted after a worker failed them.",
            static_cast<double>(s.failovers_total));
  w.counter("dsinfer_router_handoffs_total", "Prefill -> decode KV handoffs completed.",
            static_cast<double>(s.handoffs_total));
  w.counter("dsinfer_router_handoff_bytes_total", "Bytes of sequence state handed off (the prefill's state_bytes).",
            static_cast<double>(s.handoff_bytes_total));
  w.counter("dsinfer_router_handoff_seconds_total",
            "Time from a prefill's answer to its decode stream's first line, summed over handoffs.",
            s.handoff_seconds_total);
  w.counter("dsinfer_router_requests_total", "Requests accepted by the router.", static_cast<double>(s.requests_total));
  w.counter("dsinfer_router_rejected_full_total", "Requests refused because every decode worker was full (429).",
            static_cast<double>(s.rejected_full_total));
  w.counter("dsinfer_router_stalls_total",
            "Workers dropped because a call made no progress within --progress-timeout.",
            static_cast<double>(s.stalls_total));
}

void serve_internal(router::RemoteEngine& eng, const std::shared_ptr<server::Exchange>& ex) {
  const auto& req = ex->request();
  const auto error = [&](int status, const std::string& message) {
    ex->respond(status, "application/json",
                server::error_body(server::ErrorFlavor::kOpenAI, server::ApiError{status, message, "", "", {}}));
  };
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (req.path == "/internal/v1/workers/heartbeat") {
    if (req.method != "POST") return error(405, "use POST");
    try {
      return ex->respond(200, "application/json", eng.heartbeat(ex->take_body()));
    } catch (const core::Error& e) {
      return error(400, e.what());
    }
  }
  if (req.path == "/internal/v1/workers") {
    if (!get) return error(405, "use GET");
    return ex->respond(200, "application/json", eng.workers_json());
  }
  if (req.path == "/internal/v1/health") {
    if (!get) return error(405, "use GET");
    return ex->respond(200, "application/json", R"({"role":"router","ready":true})");
  }
  error(404, "no route for " + req.method + " " + req.path);
}

int run_router(int argc, char** argv) {
  Args args("router",
            "The client-facing server of a prefill/decode cluster: the OpenAI and Anthropic APIs of `dsinfer serve`\n"
            "over workers started with `dsinfer serve --role prefill|decode --router URL`, which register by\n"
            "heartbeat (POST /internal/v1/workers/heartbeat). Reads the model's config.json and tokenizer.json\n"
            "only (no weights). Stops cleanly on SIGINT/SIGTERM.");
  args.option("model", "DIR", "model directory: config.json and tokenizer.json (weights are not read; default: the "
                              "embedded tiny model)");
  add_api_server_flags(args,
                       "require this key on /v1/* and /internal/* (also from $DSINFER_API_KEY); sent to the workers "
                       "too");
  args.option("lease", "SECONDS", "a worker that sends no heartbeat for this long leaves the pool", "3");
  args.option("prefill-buckets", "BOUNDS", "prompt-length bucket bounds of the prefill queue (K = 1024)",
              "16K,64K,256K");
  args.option("prefill-quota-tokens", "N", "prompt tokens a prefill worker may have in flight from this router",
              "16384");
  args.option("count-weight", "W", "decode balancer: weight of request count vs KV length, in [0, 1]", "0.5");
  args.option("reserve-output-tokens", "N",
              "decode admission reserves prompt + max_tokens of KV, max_tokens counted up to N", "32768");
  args.option("max-failovers", "N", "times one request is re-submitted after worker failures before it fails", "4");
  args.option("queue-timeout", "SECONDS", "a request waiting this long for a prefill worker or decode room fails",
              "60");
  args.option("max-queue", "N", "requests the router holds at once; beyond it 429", "4096");
  args.option("progress-timeout", "SECONDS",
              "a worker call with no progress this long (no prefill answer, no decode tokens) fails over and the "
              "worker leaves the pool for as long again (a worker that heartbeats while its engine hangs); must "
              "exceed the longest prefill; 0: off",
              "300");
  if (!args.parse(argc, argv)) return args.exit_code();

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  server::ServeSignals signal_watch(signals);

  const ApiServerFlags api_flags = read_api_server_flags(args, kCommand);
  server::ApiServerOptions opt = api_flags.options;
  const auto drain = api_flags.drain;

  std::string model_dir;
  std::string default_name;
  if (auto dir = args.get_optional("model")) {
    model_dir = *dir;
    DSINFER_CHECK(fs::is_directory(model_dir), "dsinfer router: --model ", model_dir, " is not a directory");
    default_name = model_dir_name(model_dir);
  } else {
    default_name = server::kDefaultModelName;
    model_dir = server::ensure_default_model(nullptr).dir;
  }
  opt.model_names = served_model_names(args, default_name);

  const model::ModelConfig config = model::ModelConfig::load((fs::path(model_dir) / "config.json").string());
  resolve_prompt_version(args, config, opt);
  const auto tok = recipe::load_prompt_tokenizer(model_tokenizer_path(model_dir, config, "router"), opt.prompt_version);

  router::RemoteEngineOptions ropt;
  ropt.max_context = config.max_position_embeddings;
  ropt.eos_token_id = static_cast<int32_t>(config.eos_token_id);
  ropt.api_key = opt.api_key;
  ropt.lease = seconds_flag(args, "lease", kCommand);
  ropt.prefill.bucket_bounds = router::parse_bucket_bounds(args.get("prefill-buckets"));
  ropt.prefill_quota_tokens = args.get_int("prefill-quota-tokens", 1, int64_t{1} << 40);
  ropt.count_weight = args.get_double("count-weight");
  DSINFER_CHECK(ropt.count_weight >= 0 && ropt.count_weight <= 1, "dsinfer router: --count-weight must be in [0, 1]");
  ropt.reserve_output_tokens = args.get_int("reserve-output-tokens", 1, int64_t{1} << 40);
  ropt.max_failovers = static_cast<int>(args.get_int("max-failovers", 0, 1000));
  ropt.queue_timeout = seconds_flag(args, "queue-timeout", kCommand);
  ropt.max_queue = static_cast<int32_t>(args.get_int("max-queue", 1, INT32_MAX));
  const double progress_s = args.get_double("progress-timeout");
  DSINFER_CHECK(progress_s >= 0 && progress_s <= 1e6, "dsinfer router: --progress-timeout must be in [0, 1000000] "
                "seconds, got ", progress_s);
  ropt.progress_timeout = std::chrono::milliseconds(static_cast<int64_t>(progress_s * 1000));
  auto eng = std::make_unique<router::RemoteEngine>(ropt);
  router::RemoteEngine* eng_ptr = eng.get();
  opt.internal_routes = [eng_ptr](std::shared_ptr<server::Exchange> ex) { serve_internal(*eng_ptr, ex); };
  opt.extra_metrics = [eng_ptr](server::PromWriter& w) { write_router_metrics(eng_ptr->stats(), w); };

  server::ApiServer api(opt, *eng, *tok);
  api.start();
  std::printf("dsinfer router: model \"%s\" (config and tokenizer from %s, context %lld tokens)\n",
              opt.model_names.front().c_str(), model_dir.c_str(), static_cast<long long>(ropt.max_context));
  std::printf("dsinfer router: listening on http://%s:%u (workers register at /internal/v1/workers/heartbeat)%s\n",
              opt.host.find(':') != std::string::npos ? ("[" + opt.host + "]").c_str() : opt.host.c_str(),
              static_cast<unsigned>(api.port()), opt.api_key.empty() ? "" : ", API key required");
  signal_watch.serving([&api] { api.cancel_in_flight(); });
  std::printf("dsinfer router: ready\n");
  std::fflush(stdout);

  const int sig = signal_watch.wait_first();
  std::printf("dsinfer router: %s received, finishing in-flight requests\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  api.shutdown(drain);
  eng.reset();
  signal_watch.finish();
  std::printf("dsinfer router: stopped\n");
  return 0;
}

}  // namespace
DSINFER_COMMAND("router", "the client-facing router of a prefill/decode cluster (no weights)", run_router);
}  // namespace dsinfer::cli
