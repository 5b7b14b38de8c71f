// The Engram compressed-token map of the V4.1 tokenizer (model-v41.md §5) from dsinfer's ICU derivation,
// compared entry by entry with two independent implementations: reference/engram_v41.py (Python's
// unicodedata) and engram_token_map_hf.js (Hugging Face's own normalizers and decoder, npm `tokenizers`,
// what the spec's known answers were computed with). All three must give the same 129,280 entries.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/deepseek_v41/token_map.h"
#include "model/test_util.h"
#include "run_command.h"
#include "tokenizer/deepseek_v4.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using model::testing::TempDir;

// Differences between two maps: their count and the first few token ids.
std::string differences(const std::vector<int64_t>& a, const std::vector<int64_t>& b, size_t& count) {
  count = a.size() == b.size() ? 0 : 1;
  std::string first;
  for (size_t t = 0; t < std::min(a.size(), b.size()); ++t) {
    if (a[t] == b[t]) continue;
    if (++count <= 10) first += " " + std::to_string(t);
  }
  return first;
}

class EngramTokenMapCrossCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base_path = std::string(DSINFER_SOURCE_DIR) + "/" + tokenizer::kNpmV3BasePath;
    const std::string base = model::testing::read_bytes(base_path);
    ASSERT_FALSE(base.empty()) << "missing " << base_path << " (scripts/setup.sh installs it)";
    const std::string json = tokenizer::build_deepseek_tokenizer_json(base, tokenizer::DeepseekVersion::kV41, base_path);
    model::testing::write_bytes(dir_.file("tokenizer.json"), json);
    ours_ = derive_engram_token_map(tokenizer::Tokenizer::from_json_text(json));
    ASSERT_EQ(ours_.compressed_vocab, 99092);
  }

  void compare_with(const std::string& command, const std::string& out) {
    const auto r = test_paths::run_command(command + " 2>&1");
    ASSERT_EQ(r.status, 0) << command << "\n" << r.out;
    const auto j = nlohmann::json::parse(model::testing::read_bytes(out));
    const auto theirs = j.at("token_map").get<std::vector<int64_t>>();
    EXPECT_EQ(j.at("compressed_vocab_size").get<int64_t>(), 99092);
    size_t count = 0;
    const std::string first = differences(ours_.map, theirs, count);
    EXPECT_EQ(count, 0u) << command << ": " << count << " entries differ (" << ours_.map.size() << " vs "
                         << theirs.size() << " entries), first token ids:" << first;
  }

  TempDir dir_;
  EngramTokenMap ours_;
};

TEST_F(EngramTokenMapCrossCheck, MatchesThePythonReference) {
  compare_with("/usr/bin/python3 " + std::string(DSINFER_SOURCE_DIR) + "/reference/engram_v41.py token-map " +
                   dir_.file("tokenizer.json") + " " + dir_.file("py.json"),
               dir_.file("py.json"));
}

TEST_F(EngramTokenMapCrossCheck, MatchesHuggingFaceTokenizers) {
  if (test_paths::run_command("command -v node >/dev/null").status != 0) GTEST_SKIP() << "no node";
  compare_with("node " + std::string(DSINFER_SOURCE_DIR) + "/tests/model/deepseek_v41/engram_token_map_hf.js " +
                   dir_.file("tokenizer.json") + " " + dir_.file("hf.json"),
               dir_.file("hf.json"));
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
