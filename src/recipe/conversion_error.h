// The error of request conversion: a message meant for the client and whether the client (400) or the
// server (500) is at fault. The HTTP body follows the OpenAI error shape the reference servers send.
#pragma once

#include <string>

#include "core/error.h"
#include "recipe/json_text.h"

namespace dsinfer::recipe {

class ConversionError : public core::Error {
 public:
  enum class Kind { kBadRequest, kInternal };

  ConversionError(Kind kind, const std::string& message) : core::Error(message), kind_(kind) {}

  Kind kind() const { return kind_; }
  int http_status() const { return kind_ == Kind::kBadRequest ? 400 : 500; }
  // "bad_request" / "internal" (the golden-file spelling).
  const char* kind_name() const { return kind_ == Kind::kBadRequest ? "bad_request" : "internal"; }
  // {"error":{"message","type","param":null,"code"}}
  Json http_body() const;

 private:
  Kind kind_;
};

template <typename... Args>
[[noreturn]] void bad_request(Args&&... args) {
  throw ConversionError(ConversionError::Kind::kBadRequest, core::str_cat(std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void internal_error(Args&&... args) {
  throw ConversionError(ConversionError::Kind::kInternal, core::str_cat(std::forward<Args>(args)...));
}

}  // namespace dsinfer::recipe
