// dsinfer inspect: what a model directory holds and whether it matches its config.
#include <cstdio>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "model/checkpoint.h"

namespace dsinfer::cli {
namespace {

int run_inspect(int argc, char** argv) {
  Args args("inspect", "Print a model directory's config summary and check its tensors against the config.");
  args.option("model", "DIR", "model directory (config.json + safetensors)");
  args.flag("tensors", "list every tensor (name, dtype, shape, file)");
  args.flag("touch", "read every byte once (shows load speed)");
  if (!args.parse(argc, argv)) return args.exit_code();

  model::CheckpointOptions opt;
  opt.check_inventory = false;  // report problems instead of failing on the first
  auto ck = model::Checkpoint::open(args.get("model"), opt);
  std::printf("%s\n%s", ck->dir().c_str(), ck->config().summary().c_str());
  std::printf("files: %zu, tensors: %zu, data: %s\n", ck->files().size(), ck->size(),
              format_bytes(ck->total_bytes()).c_str());
  if (args.has("tensors")) {
    for (const auto& f : ck->files()) {
      for (const auto& t : f->tensors()) {
        std::printf("  %-60s %-8s %-16s %s\n", t.name.c_str(), std::string(model::dtype_name(t.dtype)).c_str(),
                    model::shape_string(t.shape).c_str(), f->path().c_str());
      }
    }
  }
  const model::InventoryReport report = ck->check_inventory();
  std::printf("inventory: %s\n", report.describe(50).c_str());
  if (args.has("touch")) {
    ProgressBar bar("reading");
    ck->touch([&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  return report.ok() ? 0 : 1;
}

}  // namespace
DSINFER_COMMAND("inspect", "show a model directory and check it against its config", run_inspect);
}  // namespace dsinfer::cli
