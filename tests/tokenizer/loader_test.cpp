#include <gtest/gtest.h>

#include "core/error.h"
#include "synthetic_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::tokenizer {
namespace {

using nlohmann::json;

json good() { return json::parse(testing::synthetic_tokenizer_json({})); }

std::string load_error(const json& j) {
  try {
    Tokenizer::from_json_text(j.dump(), "my/tokenizer.json");
  } catch (const core::Error& e) {
    return e.what();
  }
  return "loaded";
}

void expect_error(const json& j, const std::string& fragment) {
  const std::string m = load_error(j);
  EXPECT_NE(m.find("my/tokenizer.json"), std::string::npos) << m;
  EXPECT_NE(m.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << m;
}

TEST(Loader, RejectsBadFilesWithNamedErrors) {
  EXPECT_EQ(load_error(good()), "loaded");
  try {
    Tokenizer::from_json_text("{\"model\": ", "my/tokenizer.json");
    FAIL();
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
  json j = good();
  j.erase("model");
  expect_error(j, "\"model\"");
  j = good();
  j["model"]["type"] = "Unigram";
  expect_error(j, "only BPE");
  j = good();
  j["model"]["dropout"] = 0.1;
  expect_error(j, "dropout");
  j = good();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j, "unsupported normalizer \"NFKC\"");
  j = good();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j, "unsupported decoder");
  j = good();
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_error(j, "unsupported pre-tokenizer type \"Metaspace\"");
  j = good();
  j["model"]["merges"] = {"a zz"};
  expect_error(j, "merge 0");
  j = good();
  j["model"]["vocab"]["x"] = -3;
  expect_error(j, "vocab entry \"x\"");
  j = good();
  j["added_tokens"] = {{{"id", "seven"}, {"content", "<x>"}}};
  expect_error(j, "added_tokens[0]");
  j = good();
  j["model"]["continuing_subword_prefix"] = "##";
  expect_error(j, "continuing_subword_prefix");
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), core::Error);
}

TEST(Loader, AcceptsTheUsualNullsAndEmptySequences) {
  json j = good();
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}}}};
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  EXPECT_EQ(load_error(j), "loaded");
}

}  // namespace
}  // namespace dsinfer::tokenizer
