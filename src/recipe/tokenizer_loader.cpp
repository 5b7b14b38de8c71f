#include "recipe/tokenizer_loader.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/deepseek_v4.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::recipe {

std::unique_ptr<tokenizer::Tokenizer> load_deepseek_tokenizer(std::string_view name, const TokenizerSources& sources) {
  if (sources.file) return std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(*sources.file));
  const auto version = tokenizer::parse_deepseek_version(name);
  DSINFER_CHECK(version.has_value(), "unknown tokenizer '", name, "' (expected v4 or v41)");
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
