#include "run_command.h"

#include <sys/wait.h>

#include <cstdio>

namespace dsinfer::test_paths {

CommandResult run_command(const std::string& shell_command) {
  CommandResult r;
  FILE* p = ::popen(shell_command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace dsinfer::test_paths
