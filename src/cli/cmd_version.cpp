#include <cstdio>

#include "cli/args.h"
#include "cli/command.h"

namespace dsinfer::cli {
namespace {

int run_version(int argc, char** argv) {
  Args args("version", "Print the dsinfer version.");
  if (!args.parse(argc, argv)) return args.exit_code();
  std::printf("dsinfer 0.1.0\n");
  return 0;
}

}  // namespace
DSINFER_COMMAND("version", "print the version", run_version);
}  // namespace dsinfer::cli
