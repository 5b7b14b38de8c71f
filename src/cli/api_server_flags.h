// The flags of the client-facing HTTP server that `dsinfer serve` and `dsinfer router` share (the same
// server::ApiServer runs in both): listening, the API key, limits, timeouts, threads, the prompt template,
// the Responses store and the served model names. Spelled, documented and bounded once, so the two
// commands cannot drift apart.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cli/args.h"
#include "server/api_server.h"

namespace dsinfer::model {
struct ModelConfig;
}

namespace dsinfer::cli {

// --served-model-name .. --responses-store-bytes; api_key_help documents --api-key for this command.
void add_api_server_flags(Args& args, const char* api_key_help);

struct ApiServerFlags {
  server::ApiServerOptions options;   // everything but model_names and what the command adds
  std::chrono::milliseconds drain{};  // --shutdown-timeout
};
// `command` ("dsinfer serve") starts every error message.
ApiServerFlags read_api_server_flags(const Args& args, const char* command);

// A SECONDS flag, bounded so that the conversion to milliseconds cannot overflow (a million seconds is
// 11 days).
std::chrono::milliseconds seconds_flag(const Args& args, const char* name, const char* command);

// Without --prompt-version, sets the template of the model's architecture (the registry's tokenizer
// version): a V4.1 checkpoint gets the V4.1 template and control tokens. One decision for serve and
// router, which render the same requests for the same model.
void resolve_prompt_version(const Args& args, const model::ModelConfig& config, server::ApiServerOptions& options);

// The model's tokenizer.json, or (with a warning) the built tokenizer of its architecture's version
// (V4.1's for DeepseekV41ForCausalLM), made from the npm base when missing.
std::string model_tokenizer_path(const std::string& model_dir, const model::ModelConfig& config,
                                 const char* command);

// The model's default name: its directory's name.
std::string model_dir_name(const std::string& model_dir);
// --served-model-name's names, or {default_name} when it is not given (or names nothing).
std::vector<std::string> served_model_names(const Args& args, const std::string& default_name);

}  // namespace dsinfer::cli
