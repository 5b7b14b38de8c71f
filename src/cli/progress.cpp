#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>

namespace dsinfer::cli {

std::string format_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof(buf), "%.2f %s", v, kUnits[u]);
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::FILE* out, int tty)
    : label_(std::move(label)), out_(out), tty_(tty < 0 ? ::isatty(::fileno(out)) != 0 : tty != 0),
      start_(std::chrono::steady_clock::now()), last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (finished_) return;
  const double frac = total ? std::min(1.0, static_cast<double>(done) / static_cast<double>(total)) : 1.0;
  const int percent = static_cast<int>(frac * 100.0);
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    // Redraw at most 10 times a second, and always at 100 %.
    if (now - last_draw_ < std::chrono::milliseconds(100) && percent < 100) return;
    last_draw_ = now;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(frac * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), ' ');
    std::fprintf(out_, "\r%s [%s] %3d%% %s / %s %.1fs", label_.c_str(), bar.c_str(), percent,
                 format_bytes(done).c_str(), format_bytes(total).c_str(), secs);
    std::fflush(out_);
  } else if (percent / 10 != last_percent_ / 10 || last_percent_ < 0) {
    std::fprintf(out_, "%s: %d%% (%s / %s, %.1fs)\n", label_.c_str(), percent, format_bytes(done).c_str(),
                 format_bytes(total).c_str(), secs);
    std::fflush(out_);
  }
  last_percent_ = percent;
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (tty_ && last_percent_ >= 0) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace dsinfer::cli
