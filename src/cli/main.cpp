#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/command.h"
#include "core/error.h"
#include "core/malloc_tuning.h"

namespace dsinfer::cli {

std::vector<Command>& commands() {
  static std::vector<Command> list;
  return list;
}

bool register_command(Command command) {
  commands().push_back(std::move(command));
  return true;
}

namespace {
void print_overview() {
  auto list = commands();
  std::sort(list.begin(), list.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  std::printf("usage: dsinfer <command> [flags]   (dsinfer <command> --help for its flags)\n\ncommands:\n");
  int width = 0;
  for (const auto& c : list) width = std::max(width, static_cast<int>(c.name.size()));
  for (const auto& c : list) std::printf("  %-*s  %s\n", width, c.name.c_str(), c.summary.c_str());
}
}  // namespace

}  // namespace dsinfer::cli

int main(int argc, char** argv) {
  using namespace dsinfer::cli;
  dsinfer::core::tune_malloc_for_steps();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    print_overview();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : commands()) {
    if (c.name == argv[1]) {
      try {
        return c.run(argc - 1, argv + 1);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "dsinfer %s: error: %s\n", argv[1], e.what());
        return 1;
      }
    }
  }
  std::fprintf(stderr, "dsinfer: unknown command '%s'\n", argv[1]);
  print_overview();
  return 2;
}
