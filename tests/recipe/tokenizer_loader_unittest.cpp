// A tokenizer.json without the prompt template's control tokens is refused when it is loaded for a model
// (serve start, --tokenizer), naming the missing tokens, instead of failing every request later.
#include "recipe/tokenizer_loader.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <unistd.h>

#include "../tokenizer/synthetic_tokenizer.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe {
namespace {

// A synthetic byte-level tokenizer whose added tokens are `controls`, written to a temporary file.
class TokenizerFile {
 public:
  explicit TokenizerFile(const std::vector<std::string_view>& controls) {
    tokenizer::testing::SyntheticSpec spec;
    int id = 256;
    for (std::string_view c : controls) spec.added_tokens.push_back(tokenizer::testing::added(id++, std::string(c), true, false));
    path_ = (std::filesystem::temp_directory_path() / ("dsinfer_tokloader_" + std::to_string(::getpid()) + "_" +
                                                        std::to_string(counter_++) + ".json"))
                .string();
    std::ofstream(path_) << tokenizer::testing::synthetic_tokenizer_json(spec);
  }
  ~TokenizerFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::Error& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::kInvalidInput);
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(TokenizerLoader, EveryTemplateControlTokenMustBeAnAddedToken) {
  const auto v4 = template_control_tokens(PromptVersion::kV4);
  const auto v41 = template_control_tokens(PromptVersion::kV41);
  EXPECT_EQ(v41.size(), v4.size() + 1);  // <｜System｜>

  const TokenizerFile complete(v41);
  EXPECT_NO_THROW(load_prompt_tokenizer(complete.path(), PromptVersion::kV4));
  EXPECT_NO_THROW(load_prompt_tokenizer(complete.path(), PromptVersion::kV41));

  // Without <｜User｜> and </think>: both named, with the file.
  std::vector<std::string_view> partial;
  for (std::string_view t : v4)
    if (t != tokens::kUser && t != tokens::kThinkEnd) partial.push_back(t);
  const TokenizerFile lacking(partial);
  const std::string msg = error_of([&] { load_prompt_tokenizer(lacking.path(), PromptVersion::kV4); });
  EXPECT_NE(msg.find(lacking.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 control tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("'") + tokens::kUser + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'</think>'"), std::string::npos) << msg;
  EXPECT_EQ(msg.find(tokens::kAssistant), std::string::npos) << msg;

  // A V4 tokenizer (no <｜System｜>) for V4.1 prompts.
  const TokenizerFile v4_only(v4);
  const std::string v41_msg = error_of([&] { load_prompt_tokenizer(v4_only.path(), PromptVersion::kV41); });
  EXPECT_NE(v41_msg.find("1 control token of the v41 prompt template is"), std::string::npos) << v41_msg;
  EXPECT_NE(v41_msg.find(tokens::kSystem), std::string::npos) << v41_msg;

  // --tokenizer FILE of render / recipe goes through the same check.
  TokenizerSources sources;
  sources.file = lacking.path();
  EXPECT_NE(error_of([&] { load_deepseek_tokenizer("v4", sources); }).find("'</think>'"), std::string::npos);
  sources.file = complete.path();
  EXPECT_NO_THROW(load_deepseek_tokenizer("v41", sources));
}

}  // namespace
}  // namespace dsinfer::recipe
