// Subcommands of the `dsinfer` binary. Each lives in its own cmd_<name>.cpp and registers itself with
// DSINFER_COMMAND, so adding a command never touches a shared file.
#pragma once

#include <string>
#include <vector>

namespace dsinfer::cli {

struct Command {
  std::string name;
  std::string summary;
  int (*run)(int argc, char** argv);  // argv[0] is the command name
};

std::vector<Command>& commands();
bool register_command(Command command);

}  // namespace dsinfer::cli

#define DSINFER_COMMAND(name, summary, fn) \
  static const bool dsinfer_registered_##fn = ::dsinfer::cli::register_command({name, summary, fn})
