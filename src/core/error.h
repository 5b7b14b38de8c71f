// Errors of dsinfer: one exception type that carries a readable message naming what was wrong and where,
// and a kind that tells whose fault it is. Only the kind decides what a server may tell a client: the
// text of an internal error can name files, sizes or code paths and stays in the log.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsinfer::core {

enum class ErrorKind : uint8_t {
  kInvalidInput,  // the input (request, file, flag, config, stored bytes) is wrong or corrupt: its sender can fix it
  kUnsupported,   // the input is well-formed but asks for something this build does not do
  kInternal,      // a broken invariant or a failing environment: nothing the sender of the input can fix
};

class Error : public std::runtime_error {
 public:
  // Invalid input by default: the checks below guard input (DSINFER_CHECK), which is what most errors are.
  explicit Error(const std::string& message, ErrorKind kind = ErrorKind::kInvalidInput)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// "invalid input", "unsupported", "internal"
inline const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidInput: return "invalid input";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kInternal: return "internal";
  }
  return "?";
}

template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// An invalid-input error.
template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void fail_unsupported(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...), ErrorKind::kUnsupported);
}

template <typename... Args>
[[noreturn]] void fail_internal(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...), ErrorKind::kInternal);
}

}  // namespace dsinfer::core

// Checks that stay on in release builds: they guard user input and file contents, not programmer mistakes
// (those are DSINFER_CHECK_INTERNAL: a failure is a bug, reported as an internal error).
#define DSINFER_CHECK(cond, ...)                      \
  do {                                                \
    if (!(cond)) ::dsinfer::core::fail(__VA_ARGS__); \
  } while (0)
#define DSINFER_CHECK_INTERNAL(cond, ...)                      \
  do {                                                         \
    if (!(cond)) ::dsinfer::core::fail_internal(__VA_ARGS__); \
  } while (0)
