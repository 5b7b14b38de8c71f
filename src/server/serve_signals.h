// SIGINT/SIGTERM for the whole run of `dsinfer serve`: the signals are blocked in every thread and one
// thread of this class sigwaits for them. Before serving() a signal ends the process at once (loading
// holds nothing to drain and may take minutes). Serving, the first signal wakes wait_first(); the
// second runs the serving() callback (cancel what is in flight) and, if the process has not called
// finish() `force_exit_after` later (an engine step that never returns), ends it with status 1.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace dsinfer::server {

class ServeSignals {
 public:
  static constexpr std::chrono::milliseconds kForceExitAfter{20000};

  // `set` must already be blocked in the calling thread (and so in every thread started after it).
  explicit ServeSignals(const sigset_t& set, std::chrono::milliseconds force_exit_after = kForceExitAfter);
  ~ServeSignals() { finish(); }
  ServeSignals(const ServeSignals&) = delete;
  ServeSignals& operator=(const ServeSignals&) = delete;

  void serving(std::function<void()> on_second);
  int wait_first();
  // The process has stopped: no more callbacks, no forced exit.
  void finish();

 private:
  void run();

  sigset_t set_;
  std::chrono::milliseconds force_exit_after_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> on_second_;  // set once serving
  int first_ = 0;
  bool finished_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

}  // namespace dsinfer::server
