#include "recipe/conversion_error.h"

namespace dsinfer::recipe {

Json ConversionError::http_body() const {
  const char* type = kind_ == Kind::kBadRequest ? "invalid_request_error" : "internal_error";
  Json error = Json::object();
  error["message"] = what();
  error["type"] = type;
  error["param"] = nullptr;
  error["code"] = type;
  Json body = Json::object();
  body["error"] = std::move(error);
  return body;
}

}  // namespace dsinfer::recipe
