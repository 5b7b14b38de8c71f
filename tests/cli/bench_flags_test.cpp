// `dsinfer bench`'s own flags, checked before any model is loaded: a bad --prefill-rounds is refused
// with a message naming the flag, and the help documents it.
#include <gtest/gtest.h>

#include <string>

#include "run_command.h"

namespace dsinfer::cli {
namespace {

test_paths::CommandResult bench(const std::string& flags) {
  return test_paths::run_command(std::string(DSINFER_BIN) + " bench " + flags + " 2>&1");
}

TEST(BenchFlags, PrefillRoundsBelowOneIsRefusedByName) {
  for (const char* rounds : {"0", "-2"}) {
    const auto r = bench(std::string("--model /nonexistent-dsinfer-model --prefill-rounds ") + rounds);
    EXPECT_NE(r.status, 0) << rounds;
    EXPECT_NE(r.out.find("--prefill-rounds must be >= 1"), std::string::npos) << r.out;
  }
}

TEST(BenchFlags, HelpDocumentsPrefillRoundsAndItsDefault) {
  const auto r = bench("--help");
  EXPECT_EQ(r.status, 0) << r.out;
  const size_t at = r.out.find("--prefill-rounds N");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(default: 3)", at), std::string::npos) << r.out.substr(at, 400);
}

}  // namespace
}  // namespace dsinfer::cli
