// Progress reporting for long CLI operations (loading or writing checkpoints): a redrawn bar on a
// terminal, a log line every 10 % otherwise (so logs of non-interactive runs stay short).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace dsinfer::cli {

class ProgressBar {
 public:
  // Draws on `out` (stderr by default); `tty` defaults to whether `out` is a terminal.
  explicit ProgressBar(std::string label, std::FILE* out = stderr, int tty = -1);
  ~ProgressBar();

  void update(uint64_t done, uint64_t total);
  void finish();  // ends the bar line (idempotent)

 private:
  std::string label_;
  std::FILE* out_;
  bool tty_;
  bool finished_ = false;
  int last_percent_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "1.23 GiB", "512 KiB", "17 B".
std::string format_bytes(uint64_t bytes);

}  // namespace dsinfer::cli
