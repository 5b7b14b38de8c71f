// Runs a shell command line for the tests that drive the `dsinfer` binary as a user would.
#pragma once

#include <string>

namespace dsinfer::test_paths {

struct CommandResult {
  int status = -1;  // the exit status; -1 when the command did not exit normally or could not start
  std::string out;  // what it wrote to stdout (redirect stderr in the command line to see it here)
};

CommandResult run_command(const std::string& shell_command);

}  // namespace dsinfer::test_paths
