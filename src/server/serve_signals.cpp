#include "server/serve_signals.h"

#include <cstdio>
#include <cstdlib>

namespace dsinfer::server {
namespace {
const char* name(int sig) { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }
}  // namespace

ServeSignals::ServeSignals(const sigset_t& set, std::chrono::milliseconds force_exit_after)
    : set_(set), force_exit_after_(force_exit_after), thread_([this] { run(); }) {}

void ServeSignals::serving(std::function<void()> on_second) {
  std::lock_guard lock(mu_);
  on_second_ = std::move(on_second);
}

int ServeSignals::wait_first() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return first_ != 0; });
  return first_;
}

void ServeSignals::finish() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    finished_ = true;
  }
  cv_.notify_all();
  pthread_kill(thread_.native_handle(), SIGTERM);  // wakes a sigwait; stays pending otherwise
  thread_.join();
}

void ServeSignals::run() {
  int sig = 0;
  sigwait(&set_, &sig);
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    if (!on_second_) {
      std::fprintf(stderr, "dsinfer serve: %s before the server was ready; exiting\n", name(sig));
      std::_Exit(128 + sig);
    }
    first_ = sig;
  }
  cv_.notify_all();
  sigwait(&set_, &sig);
  std::unique_lock lock(mu_);
  if (finished_) return;
  on_second_();
  if (cv_.wait_for(lock, force_exit_after_, [&] { return finished_; })) return;
  std::fprintf(stderr, "dsinfer serve: still stopping %g s after the second signal (an engine step does not "
               "return); exiting\n", std::chrono::duration<double>(force_exit_after_).count());
  std::_Exit(1);
}

}  // namespace dsinfer::server
