// The tokenizer cases of tests/data/recipe/ (336 strings per version, generated with Hugging Face tokenizers 0.23.2
// from the recipe's bundled V4 / V4.1 tokenizer.json): ids, decode and decode with
// skip_special_tokens must all match. Every failing case is reported by index and text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/incremental_decoder.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

struct Case {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
  std::string decoded_skip_special;
};

std::vector<Case> load_cases(const std::string& file, const std::string& expected_name) {
  const std::string path = std::string(DSINFER_SOURCE_DIR) + "/tests/data/recipe/" + file;
  const std::string text = testing::read_file(path);
  EXPECT_FALSE(text.empty()) << "cannot read " << path;
  std::vector<Case> out;
  if (text.empty()) return out;
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j.at("tokenizer").get<std::string>(), expected_name);
  for (const auto& c : j.at("cases"))
    out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                   c.at("decoded").get<std::string>(), c.at("decoded_skip_special").get<std::string>()});
  return out;
}

std::string show(const std::string& s) { return nlohmann::json(s).dump().substr(0, 120); }

std::string show(const std::vector<int32_t>& ids) { return nlohmann::json(ids).dump().substr(0, 200); }

void check_cases(DeepseekVersion version, const std::string& file, const std::string& name) {
  const auto cases = load_cases(file, name);
  ASSERT_EQ(cases.size(), 336u) << file;
  const Tokenizer& tok = testing::deepseek(version);
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto ids = tok.encode(c.text);
    if (ids != c.ids) {
      ++failures;
      ADD_FAILURE() << file << " case " << i << " " << show(c.text) << ": ids " << show(ids) << ", expected "
                    << show(c.ids);
    }
    const std::string decoded = tok.decode(c.ids, false);
    if (decoded != c.decoded) {
      ++failures;
      ADD_FAILURE() << file << " case " << i << " " << show(c.text) << ": decode " << show(decoded) << ", expected "
                    << show(c.decoded);
    }
    const std::string skipped = tok.decode(c.ids, true);
    if (skipped != c.decoded_skip_special) {
      ++failures;
      ADD_FAILURE() << file << " case " << i << " " << show(c.text) << ": decode(skip_special_tokens) "
                    << show(skipped) << ", expected " << show(c.decoded_skip_special);
    }
    // Streaming one id at a time gives the same text.
    IncrementalDecoder stream(tok, true);
    std::string streamed;
    for (const int32_t id : c.ids) streamed += stream.step(id);
    streamed += stream.flush();
    if (streamed != c.decoded_skip_special) {
      ++failures;
      ADD_FAILURE() << file << " case " << i << " " << show(c.text) << ": incremental decode " << show(streamed);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(TokenizerCases, V41AllCasesMatch) { check_cases(DeepseekVersion::kV41, "tokenizer_cases.json", "v41"); }

TEST(TokenizerCases, V4AllCasesMatch) { check_cases(DeepseekVersion::kV4, "tokenizer_cases_v4.json", "v4"); }

}  // namespace
}  // namespace dsinfer::tokenizer
