#include "server/api_errors.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace dsinfer::server {

using Json = nlohmann::ordered_json;  // keys in the order the protocols document them

ErrorFlavor flavor_for_path(std::string_view path) {
  return path.rfind("/v1/messages", 0) == 0 ? ErrorFlavor::kAnthropic : ErrorFlavor::kOpenAI;
}

ErrorFlavor flavor_for_request(const HttpRequest& req) {
  return req.has_header("anthropic-version") ? ErrorFlavor::kAnthropic : flavor_for_path(req.path);
}

std::string openai_error_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 403) return "permission_error";
  if (status == 404) return "invalid_request_error";
  if (status == 429) return "rate_limit_error";
  if (status == 503) return "service_unavailable";
  if (status >= 500) return "internal_error";
  return "invalid_request_error";
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

namespace {
std::string default_code(int status) {
  switch (status) {
    case 401: return "invalid_api_key";
    case 404: return "not_found";
    case 405: return "method_not_allowed";
    case 408: return "request_timeout";
    case 413: return "request_too_large";
    case 429: return "rate_limit_exceeded";
    case 503: return "service_unavailable";
    default: return status >= 500 ? "internal_error" : "invalid_request_error";
  }
}
}  // namespace

std::string error_body(ErrorFlavor flavor, const ApiError& error) {
  // dump with replace: a message quoting the client's invalid UTF-8 must still serialise.
  if (flavor == ErrorFlavor::kAnthropic) {
    Json j = {{"type", "error"}, {"error", {{"type", anthropic_error_type(error.status)}, {"message", error.message}}}};
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  Json j = {{"error",
             {{"message", error.message},
              {"type", openai_error_type(error.status)},
              {"param", error.param.empty() ? Json(nullptr) : Json(error.param)},
              {"code", error.code.empty() ? default_code(error.status) : error.code}}}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool is_internal_exception(const std::exception& e) {
  const auto* err = dynamic_cast<const core::Error*>(&e);
  return err == nullptr || err->kind() == core::ErrorKind::kInternal;
}

ApiError api_error_for_exception(const std::exception& e, const std::string& incident) {
  if (!is_internal_exception(e)) {
    const auto& err = static_cast<const core::Error&>(e);
    return ApiError{400, err.what(), err.kind() == core::ErrorKind::kUnsupported ? "unsupported_value" : "", "", {}};
  }
  return ApiError{500, "internal server error (incident " + incident + "; the details are in the server log)", "", "", {}};
}

std::string new_incident_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(rng()));
  return std::string("err_") + hex;
}

std::string reshape_openai_error(ErrorFlavor flavor, int status, const std::string& openai_body) {
  if (flavor == ErrorFlavor::kOpenAI) return openai_body;
  std::string message = openai_body;
  try {
    Json j = Json::parse(openai_body);
    message = j.at("error").at("message").get<std::string>();
  } catch (const std::exception&) {
  }
  return error_body(flavor, ApiError{status, message, "", "", {}});
}

}  // namespace dsinfer::server
