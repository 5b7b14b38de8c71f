// dsinfer mkmodel: writes a synthetic checkpoint of a config in the official V4 format.
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "core/error.h"
#include "model/mkmodel.h"

namespace dsinfer::cli {
namespace {

int run_mkmodel(int argc, char** argv) {
  Args args("mkmodel",
            "Write a synthetic DeepSeek-V4 checkpoint (random weights in the official safetensors layout)\n"
            "for a config.json. Deterministic for a seed.");
  args.option("config", "FILE", "model config.json (e.g. configs/tiny.json)");
  args.option("seed", "N", "random seed", "0");
  args.option("out", "DIR", "output model directory (created; old model files in it are replaced)");
  args.option("tokenizer-dir", "DIR",
              "copy tokenizer.json and tokenizer_config.json from DIR (default: "
              "${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/v4 when it exists)");
  args.option("shard-size-mb", "MB", "split into shards of at most MB MiB with an index (0: one file)", "0");
  if (!args.parse(argc, argv)) return args.exit_code();

  model::MkModelOptions opt;
  opt.config_path = args.get("config");
  opt.out_dir = args.get("out");
  const int64_t seed = args.get_int("seed");
  DSINFER_CHECK(seed >= 0, "dsinfer mkmodel: --seed must be >= 0, got ", seed);
  opt.seed = static_cast<uint64_t>(seed);
  opt.tokenizer_dir = args.get_optional("tokenizer-dir");
  const int64_t shard_mb = args.get_int("shard-size-mb");
  DSINFER_CHECK(shard_mb >= 0, "dsinfer mkmodel: --shard-size-mb must be >= 0, got ", shard_mb);
  opt.shard_size_bytes = static_cast<uint64_t>(shard_mb) << 20;
  ProgressBar bar("mkmodel");
  opt.progress = [&](uint64_t done, uint64_t total) { bar.update(done, total); };

  const auto t0 = std::chrono::steady_clock::now();
  const model::MkModelResult r = model::make_model(opt);
  bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %zu tensors, %s of tensor data in %zu file(s), seed %llu, %.2f s\n", opt.out_dir.c_str(),
              r.tensors, format_bytes(r.data_bytes).c_str(), r.files.size(),
              static_cast<unsigned long long>(opt.seed), secs);
  if (!r.tokenizer_source.empty()) std::printf("tokenizer copied from %s\n", r.tokenizer_source.c_str());
  return 0;
}

}  // namespace
DSINFER_COMMAND("mkmodel", "write a synthetic checkpoint for a config", run_mkmodel);
}  // namespace dsinfer::cli
