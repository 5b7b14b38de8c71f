#include "recipe/tokenizer_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/deepseek_v4.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe {

std::vector<std::string_view> template_control_tokens(PromptVersion version) {
  // The spellings PromptWriter (prompt_render.cpp) marks as control tokens.
  std::vector<std::string_view> s = {tokens::kBos,          tokens::kEos,        tokens::kUser,
                                     tokens::kAssistant,    tokens::kLatestReminder, tokens::kThinkBegin,
                                     tokens::kThinkEnd,     tokens::kDsml};
  if (version == PromptVersion::kV41) s.push_back(tokens::kSystem);
  return s;
}

void check_template_tokens(const tokenizer::Tokenizer& tok, PromptVersion version, std::string_view source) {
  std::string missing;
  size_t n = 0;
  for (std::string_view t : template_control_tokens(version)) {
    if (tok.added_token_id(t).has_value()) continue;
    missing += core::str_cat(n++ ? ", " : "", "'", t, "'");
  }
  DSINFER_CHECK(n == 0, "tokenizer ", source, ": ", n, " control token", n == 1 ? "" : "s", " of the ",
                to_string(version), " prompt template ", n == 1 ? "is not an added token" : "are not added tokens",
                " of it: ", missing,
                " (a tokenizer.json of another model?)");
}

std::string image_placeholder(const tokenizer::Tokenizer& tok) {
  for (const auto& t : tok.added_tokens())
    if (t.id == kImageTokenId) return t.content;
  return kImagePlaceholder;
}

std::unique_ptr<tokenizer::Tokenizer> load_prompt_tokenizer(const std::string& path, PromptVersion version) {
  auto tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(path));
  check_template_tokens(*tok, version, path);
  return tok;
}

std::unique_ptr<tokenizer::Tokenizer> load_deepseek_tokenizer(std::string_view name, const TokenizerSources& sources) {
  const auto version = tokenizer::parse_deepseek_version(name);
  DSINFER_CHECK(version.has_value(), "unknown tokenizer '", name, "' (expected v4 or v41)");
  if (sources.file) {
    return load_prompt_tokenizer(*sources.file,
                                 *version == tokenizer::DeepseekVersion::kV4 ? PromptVersion::kV4 : PromptVersion::kV41);
  }
  const std::string built = tokenizer::deepseek_tokenizer_dir(*version) + "/tokenizer.json";
  if (std::filesystem::exists(built)) return std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(built));
  if (sources.npm_base && std::filesystem::exists(*sources.npm_base)) {
    std::ifstream in(*sources.npm_base, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const std::string json = tokenizer::build_deepseek_tokenizer_json(text.str(), *version, *sources.npm_base);
    return std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_json_text(json, name));
  }
  core::fail("no ", name, " tokenizer: ", built, " does not exist (run scripts/tokenizers.sh)",
             sources.npm_base ? " and the npm base " + *sources.npm_base + " is missing" : std::string(),
             "; or pass --tokenizer FILE");
}

}  // namespace dsinfer::recipe
