#include "cli/api_server_flags.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "model/config.h"
#include "model/registry.h"
#include "server/api_errors.h"
#include "server/default_model.h"

namespace dsinfer::cli {

namespace fs = std::filesystem;

void add_api_server_flags(Args& args, const char* api_key_help) {
  args.option("served-model-name", "NAMES",
              "comma-separated names that requests may give as \"model\"; the first is listed by /v1/models",
              "dsinfer-tiny, or the model directory's name");
  args.option("host", "ADDR", "address to listen on (0.0.0.0 for every interface)", "127.0.0.1");
  args.option("port", "N", "TCP port (0 picks a free one; the ready line tells which)", "8000");
  args.option("api-key", "KEY", api_key_help);
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
  args.option("prompt-version", "v4|v41",
              "prompt template: V4 or V4.1 (default: the template of the architecture in the model's config.json)");
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
}

std::chrono::milliseconds seconds_flag(const Args& args, const char* name, const char* command) {
  const double s = args.get_double(name);
  DSINFER_CHECK(s > 0 && s <= 1e6, command, ": --", name, " must be in (0, 1000000] seconds, got ", s);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

ApiServerFlags read_api_server_flags(const Args& args, const char* command) {
  ApiServerFlags f;
  server::ApiServerOptions& opt = f.options;
  opt.host = args.get("host");
  opt.port = static_cast<uint16_t>(args.get_int("port", 0, 65535));
  const char* env_key = std::getenv("DSINFER_API_KEY");
  if (auto key = args.get_optional("api-key")) opt.api_key = *key;
  else if (env_key) opt.api_key = env_key;
  if (args.has("api-key") || env_key) {  // a key that was meant to be set must be one a client can send
    const std::string problem = server::api_key_problem(opt.api_key);
    DSINFER_CHECK(problem.empty(), command, ": ", args.has("api-key") ? "--api-key" : "$DSINFER_API_KEY", " ",
                  problem);
  }
  opt.http.max_body_bytes = static_cast<size_t>(args.get_int("max-body-bytes", 1, int64_t{1} << 36));
  opt.http.max_header_bytes = static_cast<size_t>(args.get_int("max-header-bytes", 1024, int64_t{1} << 24));
  opt.http.max_connections = static_cast<size_t>(args.get_int("max-connections", 1, int64_t{1} << 24));
  opt.http.header_timeout = seconds_flag(args, "header-timeout", command);
  opt.http.body_timeout = seconds_flag(args, "body-timeout", command);
  opt.http.idle_timeout = seconds_flag(args, "idle-timeout", command);
  opt.http.write_timeout = seconds_flag(args, "write-timeout", command);
  opt.max_prompt_tokens = args.get_int("max-prompt-tokens", 0, INT32_MAX);
  opt.max_output_tokens = args.get_int("max-tokens", 0, INT32_MAX);
  opt.max_concurrent_requests = static_cast<int>(args.get_int("max-concurrent-requests", 1, int64_t{1} << 24));
  opt.retry_after_seconds = static_cast<int>(args.get_int("retry-after", 0, 86400));
  opt.io_threads = static_cast<int>(args.get_int("io-threads", 1, 1024));
  opt.prep_threads = static_cast<int>(args.get_int("prep-threads", 1, 1024));
  const std::string pv = args.get_optional("prompt-version").value_or("v4");
  DSINFER_CHECK(pv == "v4" || pv == "v41" || pv == "v4.1", command, ": --prompt-version must be v4 or v41, got '", pv,
                "'");
  opt.prompt_version = pv == "v4" ? recipe::PromptVersion::kV4 : recipe::PromptVersion::kV41;
  opt.conversion.default_thinking_mode = !args.has("no-thinking");
  opt.separate_usage_chunk = !args.has("deepseek-usage-chunk");
  opt.responses_store_ttl = seconds_flag(args, "responses-store-ttl", command);
  opt.responses_store_bytes = args.get_int("responses-store-bytes", 0, int64_t{1} << 40);
  f.drain = seconds_flag(args, "shutdown-timeout", command);
  return f;
}

void resolve_prompt_version(const Args& args, const model::ModelConfig& config, server::ApiServerOptions& options) {
  if (args.has("prompt-version")) return;
  options.prompt_version = model::architecture_info(config.arch).tokenizer_version == "v41"
                               ? recipe::PromptVersion::kV41
                               : recipe::PromptVersion::kV4;
}

std::string model_tokenizer_path(const std::string& model_dir, const model::ModelConfig& config,
                                 const char* command) {
  const fs::path own = fs::path(model_dir) / "tokenizer.json";
  if (fs::is_regular_file(own)) return own.string();
  const std::string_view version = model::architecture_info(config.arch).tokenizer_version;
  DSINFER_LOG_WARN(command, ": ", model_dir, " has no tokenizer.json; using the built ", version, " tokenizer");
  return (fs::path(server::ensure_deepseek_tokenizer_dir(version)) / "tokenizer.json").string();
}

std::string model_dir_name(const std::string& model_dir) {
  std::string name = fs::path(model_dir).lexically_normal().filename().string();
  if (name.empty() || name == ".") name = fs::path(model_dir).lexically_normal().parent_path().filename().string();
  return name;
}

std::vector<std::string> served_model_names(const Args& args, const std::string& default_name) {
  std::vector<std::string> out;
  if (args.has("served-model-name")) {  // its "default" is only the help's description
    std::stringstream in(args.get("served-model-name"));
    std::string item;
    while (std::getline(in, item, ','))
      if (!item.empty()) out.push_back(item);
  }
  if (out.empty()) out = {default_name};
  return out;
}

}  // namespace dsinfer::cli
