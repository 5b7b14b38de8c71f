// Errors as each protocol's clients expect them. OpenAI (Chat Completions, Responses, Completions,
// models): {"error":{"message","type","param","code"}}. Anthropic (Messages):
// {"type":"error","error":{"type","message"}}. Status codes map to the types the official SDKs know.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "server/http_server.h"

namespace dsinfer::server {

enum class ErrorFlavor { kOpenAI, kAnthropic };

struct ApiError {
  int status = 400;
  std::string message;
  std::string code;   // OpenAI "code" (e.g. context_length_exceeded); empty: derived from the status
  std::string param;  // OpenAI "param"; empty: null
  HeaderList headers; // e.g. Retry-After
};

// Thrown while preparing a request; the route answers it in its protocol's shape.
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError error) : std::runtime_error(error.message), error_(std::move(error)) {}
  const ApiError& error() const { return error_; }

 private:
  ApiError error_;
};

[[noreturn]] inline void throw_api_error(int status, std::string message, std::string code = "",
                                         std::string param = "") {
  throw ApiException(ApiError{status, std::move(message), std::move(code), std::move(param), {}});
}

// What a client is told about an exception caught while serving its request (the catch-all sites of
// the API server). Only the input's own errors are the client's to fix and are told as they are:
// core::Error of kind invalid input -> 400 with its message, and of kind unsupported -> 400 too
// (code "unsupported_value"; not 501, which clients read as "this endpoint does not exist": the request
// was understood and is refused for what it asks, so it must not be retried unchanged). Everything
// else (an internal core::Error, std::bad_alloc, a library's exception) is the server's fault: 500 whose
// message carries only `incident`, an id the caller also writes to the log next to e.what(). The text of
// such an exception can name files, sizes or code paths and never reaches the client.
ApiError api_error_for_exception(const std::exception& e, const std::string& incident);
// True when api_error_for_exception hides e's text (the caller must log it).
bool is_internal_exception(const std::exception& e);
// A fresh incident id ("err_" + 16 hex digits) for a 500 and its log line.
std::string new_incident_id();

// The protocol a path belongs to: /v1/messages... is Anthropic, everything else OpenAI.
ErrorFlavor flavor_for_path(std::string_view path);
// The protocol of the client asking: an Anthropic path, or any request carrying `anthropic-version`
// (which every Anthropic SDK sends), is answered in Anthropic's shape.
ErrorFlavor flavor_for_request(const HttpRequest& req);

// OpenAI "type" / Anthropic error "type" for a status.
std::string openai_error_type(int status);
std::string anthropic_error_type(int status);

std::string error_body(ErrorFlavor flavor, const ApiError& error);

// The body of a conversion error from the recipe layer (already in OpenAI shape) re-shaped for the
// flavor: OpenAI keeps it as it is; Anthropic takes its message.
std::string reshape_openai_error(ErrorFlavor flavor, int status, const std::string& openai_body);

}  // namespace dsinfer::server
