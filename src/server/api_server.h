// The OpenAI- and Anthropic-compatible API over an engine::Engine: routes, authentication, limits,
// protocol errors, streaming, cancellation on disconnect, metrics and graceful shutdown. See README.md
// for the routes, limits and metric names.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/asio/thread_pool.hpp>

#include "engine/engine.h"
#include "recipe/convert.h"
#include "recipe/prompt.h"
#include "recipe/prompt_encoder.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/responses_store.h"
#include "server/structured_output.h"

namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::server {

struct ApiServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0 picks a free port
  std::vector<std::string> model_names = {"dsinfer"};  // names a request's "model" may use; the first is listed
  std::string api_key;   // empty: no authentication
  HttpLimits http;
  int io_threads = 2;
  int prep_threads = 2;            // threads that convert, render and encode requests
  int64_t max_prompt_tokens = 0;   // 0: what the engine's context allows
  int64_t max_output_tokens = 0;   // cap on max_tokens; 0: what the context allows
  int max_concurrent_requests = 1024;  // generation requests in flight; beyond it 429
  int retry_after_seconds = 1;     // Retry-After on 429
  recipe::PromptVersion prompt_version = recipe::PromptVersion::kV4;
  recipe::ConversionOptions conversion;
  bool separate_usage_chunk = true;  // Chat streaming: OpenAI's usage chunk (false: DeepSeek's shape)
  // Stored Responses (`store`, `previous_response_id`): kept this long after they finish, within this
  // many bytes (least recently used dropped first); 0 bytes stores nothing.
  std::chrono::milliseconds responses_store_ttl = std::chrono::hours(1);
  int64_t responses_store_bytes = int64_t{256} << 20;
  // n > 1: choices 1..n-1 are submitted when choice 0's first token arrives, so they resume from the
  // prompt's blocks and window snapshot in the prefix cache (the prompt is computed once). Only useful
  // with the engine's prefix cache; false submits every choice at once (each computes the prompt).
  bool share_prompt_kv = true;
  // A disaggregated worker's routes (disagg/worker.h): requests under /internal/ go here once the API key
  // is checked. Null: /internal/ paths are 404.
  std::function<void(std::shared_ptr<Exchange>)> internal_routes;
  // Appended to /metrics at each scrape (the worker's handoff counters).
  std::function<void(PromWriter&)> extra_metrics;
};

// Why a key cannot serve as the API key ("" when it can): an empty key would leave the server open, and
// leading or trailing whitespace or control characters can never arrive in a header as sent.
std::string api_key_problem(std::string_view key);

class ApiServer {
 public:
  // The engine and tokenizer must outlive the server.
  ApiServer(ApiServerOptions options, engine::Engine& engine, const tokenizer::Tokenizer& tokenizer);
  ~ApiServer();
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds (fails with core::Error) and starts serving.
  void start();
  uint16_t port() const { return http_->port(); }
  const ApiServerOptions& options() const { return options_; }

  // Graceful shutdown: stop accepting, let in-flight requests finish for up to `drain`, then cancel
  // the rest (each stream ends with a proper error event), stop the engine and the io threads.
  void shutdown(std::chrono::milliseconds drain);
  // Cancels every request in flight now (each stream ends with an error event); also cuts a running
  // shutdown()'s drain short. Thread-safe.
  void cancel_in_flight();

  std::string render_metrics() const { return metrics_.render(); }

  struct Call;  // one generation request (api_server.cpp)

 private:
  void handle(std::shared_ptr<Exchange> ex);
  void handle_generation(const std::shared_ptr<Exchange>& ex, int route);
  void prepare(const std::shared_ptr<Exchange>& ex, int route);  // on prep_pool_
  void count_tokens(const std::shared_ptr<Exchange>& ex);         // on prep_pool_
  void stored_response(const std::shared_ptr<Exchange>& ex);      // GET/DELETE /v1/responses/{id}
  void check_model(const recipe::Json& body) const;               // 404 for a model not served
  void submit(std::vector<std::shared_ptr<Call>> calls, std::vector<engine::RequestSpec> specs);  // on the strand
  void reply_error(const std::shared_ptr<Exchange>& ex, int route, int status, const std::string& message,
                   const std::string& code = "", HeaderList headers = {});
  void reply_json(const std::shared_ptr<Exchange>& ex, int route, int status, const std::string& body,
                  HeaderList headers = {});
  void count_response(int route, int status);
  bool authorized(const HttpRequest& req) const;
  void finish_call(Call& call);
  void register_metrics();

  friend struct Call;

  ApiServerOptions options_;
  engine::Engine& engine_;
  const tokenizer::Tokenizer& tokenizer_;
  recipe::PromptEncoder encoder_;
  StructuredOutput structured_;
  std::unique_ptr<boost::asio::thread_pool> prep_pool_;
  std::unique_ptr<HttpServer> http_;
  MetricsRegistry metrics_;
  ResponsesStore responses_;
  std::atomic<int> active_calls_{0};
  std::atomic<bool> shutting_down_{false};
  std::atomic<bool> abort_drain_{false};
  std::mutex calls_mu_;
  std::unordered_map<Call*, std::weak_ptr<Call>> calls_;
  int64_t created_unix_ = 0;

  // Metric families (owned by metrics_).
  CounterFamily* http_requests_ = nullptr;
  HistogramFamily* http_duration_ = nullptr;
  HistogramFamily* ttft_ = nullptr;
  HistogramFamily* tpot_ = nullptr;
  HistogramFamily* e2e_ = nullptr;
  CounterFamily* prompt_tokens_ = nullptr;
  CounterFamily* cached_tokens_ = nullptr;
  CounterFamily* generated_tokens_ = nullptr;
  CounterFamily* finished_ = nullptr;
  CounterFamily* cancelled_ = nullptr;
  CounterFamily* rejected_ = nullptr;
};

}  // namespace dsinfer::server
