// The DeepSeek-V4 tokenizer (built from the npm DeepSeek-V3 base) for the server tests, loaded once.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "recipe/tokenizer_loader.h"
#include "tokenizer/deepseek_v4.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {

inline const tokenizer::Tokenizer& v4() {
  static std::unique_ptr<tokenizer::Tokenizer> tok = recipe::load_deepseek_tokenizer(
      "v4", recipe::TokenizerSources{std::nullopt, std::string(DSINFER_SOURCE_DIR) + "/" + tokenizer::kNpmV3BasePath});
  return *tok;
}

}  // namespace dsinfer::server
