// The signal thread of `dsinfer serve`: a signal before serving ends the process at once, the second
// signal cancels what is in flight, and a stop that never finishes (an engine step that does not
// return) is ended by the watchdog. Each case runs in a death-test child: the signals are real.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "server/serve_signals.h"

namespace dsinfer::server {
namespace {

sigset_t block_serve_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

TEST(ServeSignalsDeathTest, ASignalBeforeServingEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const sigset_t set = block_serve_signals();
        ServeSignals signals(set);
        kill(getpid(), SIGTERM);
        for (;;) pause();  // loading: only the signal thread can end this
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "SIGTERM before the server was ready; exiting");
}

// The stop hangs (finish() is never called): after the second signal's callback, the watchdog ends
// the process with status 1 and says why.
TEST(ServeSignalsDeathTest, ASecondSignalEndsAStopThatHangs) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const sigset_t set = block_serve_signals();
        ServeSignals signals(set, std::chrono::milliseconds(100));
        signals.serving([] { std::fprintf(stderr, "cancelling in flight\n"); });
        kill(getpid(), SIGTERM);
        if (signals.wait_first() != SIGTERM) std::_Exit(3);
        kill(getpid(), SIGINT);
        for (;;) pause();  // an engine step that never returns
      },
      ::testing::ExitedWithCode(1),
      "cancelling in flight\n.*still stopping 0.1 s after the second signal .*exiting");
}

// A stop that finishes: finish() ends the watch (the thread is joined), so nothing forces an exit.
TEST(ServeSignalsDeathTest, AStopThatFinishesIsNotForced) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const sigset_t set = block_serve_signals();
        std::atomic<bool> cancelled{false};
        {
          ServeSignals signals(set, std::chrono::milliseconds(100));
          signals.serving([&] { cancelled.store(true); });
          kill(getpid(), SIGINT);
          if (signals.wait_first() != SIGINT) std::_Exit(3);
          kill(getpid(), SIGTERM);
          while (!cancelled.load()) std::this_thread::yield();
          signals.finish();
        }
        std::fprintf(stderr, "stopped cleanly\n");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "stopped cleanly");
}

}  // namespace
}  // namespace dsinfer::server
