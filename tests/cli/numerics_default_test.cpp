// The default of --numerics per command, as `dsinfer CMD --help` states it: fast for the serving
// commands (serve, generate, bench, bench-serve), exact for the verification tools (logits,
// bench-forward). The help's default is the value the command reads when the flag is absent.
#include <gtest/gtest.h>

#include <string>

#include "run_command.h"

namespace dsinfer::cli {
namespace {

// The --numerics line of the command's help, up to and including its "(default: ...)".
std::string numerics_default(const std::string& command) {
  const test_paths::CommandResult r =
      test_paths::run_command(std::string(DSINFER_BIN) + " " + command + " --help 2>&1");
  EXPECT_EQ(r.status, 0) << command << ":\n" << r.out;
  const size_t at = r.out.find("--numerics");
  if (at == std::string::npos) return "no --numerics in the help of " + command;
  const size_t open = r.out.find("(default: ", at);
  if (open == std::string::npos) return "no default";
  const size_t close = r.out.find(')', open);
  return r.out.substr(open + 10, close - open - 10);
}

TEST(NumericsDefault, FastForServingExactForVerification) {
  for (const char* command : {"serve", "generate", "bench", "bench-serve"})
    EXPECT_EQ(numerics_default(command), "fast") << command;
  for (const char* command : {"logits", "bench-forward"}) EXPECT_EQ(numerics_default(command), "exact") << command;
}

}  // namespace
}  // namespace dsinfer::cli
