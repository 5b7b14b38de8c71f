// Errors of dsinfer: one exception type that carries a readable message naming what was wrong and where.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace dsinfer::core {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(str_cat(std::forward<Args>(args)...));
}

}  // namespace dsinfer::core

// Checks that stay on in release builds: they guard user input and file contents, not programmer mistakes.
#define DSINFER_CHECK(cond, ...)                      \
  do {                                                \
    if (!(cond)) ::dsinfer::core::fail(__VA_ARGS__); \
  } while (0)
