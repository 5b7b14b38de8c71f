#include "test_tokenizers.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "recipe/conversation.h"
#include "recipe/json_text.h"
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

const tokenizer::Tokenizer* released_v41_tokenizer(std::string* why) {
  static std::mutex mutex;
  static std::unique_ptr<tokenizer::Tokenizer> loaded;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded) return loaded.get();
  // The V4.1 table's tokenizer.json: the built file, else built from the npm base as above.
  const std::string file = tokenizer::deepseek_tokenizer_dir(tokenizer::DeepseekVersion::kV41) + "/tokenizer.json";
  const std::string base = std::string(DSINFER_SOURCE_DIR) + "/" + tokenizer::kNpmV3BasePath;
  std::string json;
  if (std::ifstream in(file, std::ios::binary); in) {
    std::ostringstream text;
    text << in.rdbuf();
    json = text.str();
  } else if (std::ifstream b(base, std::ios::binary); b) {
    std::ostringstream text;
    text << b.rdbuf();
    json = tokenizer::build_deepseek_tokenizer_json(text.str(), tokenizer::DeepseekVersion::kV41, base);
  } else {
    if (why) *why = "neither " + file + " nor the npm V3 base " + base + " exists";
    return nullptr;
  }
  Json doc = parse_json(json);
  bool found = false;
  for (auto& t : doc.at("added_tokens")) {
    if (t.at("id").get<int32_t>() != kImageTokenId) continue;
    t["content"] = kReleasedV41ImagePlaceholder;
    t["special"] = false;
    t["normalized"] = true;
    found = true;
  }
  if (!found) {
    if (why) *why = "the V4.1 tokenizer.json has no added token 129264";
    return nullptr;
  }
  loaded = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_json_text(doc.dump(), "v41-released"));
  return loaded.get();
}

}  // namespace dsinfer::recipe::testing
