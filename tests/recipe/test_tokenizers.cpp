#include "test_tokenizers.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "tokenizer/deepseek_v4.h"

namespace dsinfer::recipe::testing {

const tokenizer::Tokenizer* deepseek_tokenizer(const std::string& name, std::string* why) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>> loaded;
  static std::map<std::string, std::string> failures;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(name); it != loaded.end()) return it->second.get();
  if (auto it = failures.find(name); it != failures.end()) {
    if (why) *why = it->second;
    return nullptr;
  }
  const auto version = tokenizer::parse_deepseek_version(name);
  std::string reason;
  if (!version) {
    reason = "unknown tokenizer name '" + name + "'";
  } else {
    try {
      const std::string file = tokenizer::deepseek_tokenizer_dir(*version) + "/tokenizer.json";
      if (std::filesystem::exists(file)) {
        loaded[name] = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(file));
        return loaded[name].get();
      }
      const std::string base = std::string(DSINFER_SOURCE_DIR) + "/" + tokenizer::kNpmV3BasePath;
      std::ifstream in(base, std::ios::binary);
      if (in) {
        std::ostringstream text;
        text << in.rdbuf();
        const std::string json = tokenizer::build_deepseek_tokenizer_json(text.str(), *version, base);
        loaded[name] = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_json_text(json, name));
        return loaded[name].get();
      }
      reason = "neither " + file + " (scripts/tokenizers.sh) nor the npm V3 base " + base + " (scripts/setup.sh) exists";
    } catch (const std::exception& e) {
      reason = e.what();
    }
  }
  failures[name] = reason;
  if (why) *why = reason;
  return nullptr;
}

}  // namespace dsinfer::recipe::testing
