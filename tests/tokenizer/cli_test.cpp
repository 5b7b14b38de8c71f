// `dsinfer tokenize` and `dsinfer mktokenizer`, run as processes (the tokenizer-only build of the
// same command sources, DSINFER_TOKENIZER_CLI).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tokenizer_files.h"
#include "run_command.h"

namespace dsinfer::tokenizer {
namespace {

using Result = test_paths::CommandResult;

Result run(const std::string& command, const std::string& input) {
  const std::string in_path = std::filesystem::temp_directory_path() / ("dsinfer_cli_in_" + std::to_string(::getpid()));
  {
    std::ofstream f(in_path, std::ios::binary);
    f << input;
  }
  auto r = test_paths::run_command(command + " < " + in_path + " 2>/dev/null");
  std::filesystem::remove(in_path);
  return r;
}

const std::string& tokenizer_dir() {
  static const std::string dir = [] {
    const std::string d = std::filesystem::temp_directory_path() / ("dsinfer_cli_tok_" + std::to_string(::getpid()));
    const std::string cmd = std::string(DSINFER_TOKENIZER_CLI) + " mktokenizer --base " + testing::v3_base_path() +
                            " --version v41 --out " + d;
    const Result r = run(cmd, "");
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("written"), std::string::npos) << r.out;
    return d;
  }();
  return dir;
}

std::string tokenize(const std::string& flags) {
  return std::string(DSINFER_TOKENIZER_CLI) + " tokenize --tokenizer " + tokenizer_dir() + "/tokenizer.json " + flags;
}

TEST(Cli, MktokenizerWritesTheBuilderOutputAndIsIdempotent) {
  const std::string dir = tokenizer_dir();
  EXPECT_TRUE(testing::read_file(dir + "/tokenizer.json") == testing::deepseek_json(DeepseekVersion::kV41));
  EXPECT_EQ(testing::read_file(dir + "/tokenizer_config.json"), build_deepseek_tokenizer_config(DeepseekVersion::kV41));
  const Result again = run(std::string(DSINFER_TOKENIZER_CLI) + " mktokenizer --base " + testing::v3_base_path() +
                               " --version v41 --out " + dir, "");
  EXPECT_EQ(again.status, 0);
  EXPECT_NE(again.out.find("up to date"), std::string::npos) << again.out;
  EXPECT_NE(run(std::string(DSINFER_TOKENIZER_CLI) + " mktokenizer --base /nonexistent --version v4 --out " + dir, "").status, 0);
  EXPECT_EQ(run(std::string(DSINFER_TOKENIZER_CLI) + " mktokenizer --base x --version v5 --out " + dir, "").status, 2);
}

TEST(Cli, EncodesJsonLines) {
  const Result r = run(tokenize(""), "{\"text\": \"Hello, world!\"}\n{\"text\": \"<｜User｜>hi\"}\n{\"text\": \"\"}\n");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "{\"ids\":[19923,14,2058,3]}\n{\"ids\":[128803,6366]}\n{\"ids\":[]}\n");
  const Result plain = run(tokenize("--plain"), "{\"text\": \"<｜User｜>\"}\n");
  EXPECT_EQ(plain.out, "{\"ids\":[30,28217,6756,28217,32]}\n");
}

TEST(Cli, DecodesJsonLines) {
  const std::string in = "{\"ids\": [0, 19923, 14, 2058, 3, 1]}\n{\"ids\": [28927, 225]}\n";
  const Result keep = run(tokenize("--decode"), in);
  EXPECT_EQ(keep.status, 0);
  EXPECT_EQ(keep.out, "{\"text\":\"<｜begin▁of▁sentence｜>Hello, world!<｜end▁of▁sentence｜>\"}\n{\"text\":\"😀\"}\n");
  const Result skip = run(tokenize("--decode --skip-special-tokens"), in);
  EXPECT_EQ(skip.out, "{\"text\":\"Hello, world!\"}\n{\"text\":\"😀\"}\n");
}

TEST(Cli, MalformedLinesGetErrorLinesAndAFailingExit) {
  const Result r = run(tokenize(""), "{\"text\": \"a\"}\nnot json\n{\"ids\": [1]}\n{\"text\": 5}\n{\"text\": \"b\"}\n");
  EXPECT_EQ(r.status, 1);
  std::istringstream lines(r.out);
  std::vector<std::string> out;
  for (std::string l; std::getline(lines, l);) out.push_back(l);
  ASSERT_EQ(out.size(), 5u) << r.out;
  EXPECT_EQ(out[0], "{\"ids\":[67]}");
  EXPECT_NE(out[1].find("\"error\":\"line 2: not valid JSON"), std::string::npos) << out[1];
  EXPECT_NE(out[2].find("line 3: expected an object with a string \\\"text\\\""), std::string::npos) << out[2];
  EXPECT_NE(out[3].find("line 4:"), std::string::npos) << out[3];
  EXPECT_EQ(out[4], "{\"ids\":[68]}");
  const Result d = run(tokenize("--decode"), "{\"ids\": [19923, 999999]}\n{\"ids\": [\"x\"]}\n{\"ids\": [19923]}\n");
  EXPECT_EQ(d.status, 1);
  EXPECT_NE(d.out.find("line 1: ids[1] = 999999 is not a token"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("line 2: ids[0] is not an integer"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("{\"text\":\"Hello\"}"), std::string::npos) << d.out;
  EXPECT_EQ(run(tokenize("--skip-special-tokens"), "").status, 2);
}

}  // namespace
}  // namespace dsinfer::tokenizer
