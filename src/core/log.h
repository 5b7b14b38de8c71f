// Minimal leveled logging to stderr. Level from DSINFER_LOG (error, warn, info, debug); default info.
#pragma once

#include <string>

#include "core/error.h"

namespace dsinfer::core {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, Args&&... args) {
  if (level <= log_level()) log_line(level, str_cat(std::forward<Args>(args)...));
}

}  // namespace dsinfer::core

#define DSINFER_LOG_INFO(...) ::dsinfer::core::log(::dsinfer::core::LogLevel::kInfo, __VA_ARGS__)
#define DSINFER_LOG_WARN(...) ::dsinfer::core::log(::dsinfer::core::LogLevel::kWarn, __VA_ARGS__)
#define DSINFER_LOG_ERROR(...) ::dsinfer::core::log(::dsinfer::core::LogLevel::kError, __VA_ARGS__)
#define DSINFER_LOG_DEBUG(...) ::dsinfer::core::log(::dsinfer::core::LogLevel::kDebug, __VA_ARGS__)
