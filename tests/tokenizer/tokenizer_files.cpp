#include "tokenizer_files.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

namespace dsinfer::tokenizer::testing {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string v3_base_path() { return std::string(DSINFER_SOURCE_DIR) + "/" + kNpmV3BasePath; }

const std::string& v3_base_text() {
  static const std::string text = read_file(v3_base_path());
  if (text.empty()) ADD_FAILURE() << "missing " << v3_base_path() << ": run scripts/setup.sh (npm ci into .cache/npm)";
  return text;
}

const std::string& deepseek_json(DeepseekVersion version) {
  static std::mutex mutex;
  static std::map<DeepseekVersion, std::string> built;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(version);
  if (it == built.end()) {
    const std::string& base = v3_base_text();
    it = built.emplace(version, base.empty() ? std::string() : build_deepseek_tokenizer_json(base, version, v3_base_path())).first;
  }
  return it->second;
}

const Tokenizer& deepseek(DeepseekVersion version) {
  static std::mutex mutex;
  static std::map<DeepseekVersion, Tokenizer> loaded;
  const std::string& json = deepseek_json(version);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = loaded.find(version);
  if (it == loaded.end()) {
    if (json.empty()) throw std::runtime_error("no V3 base tokenizer; run scripts/setup.sh");
    it = loaded.emplace(version, Tokenizer::from_json_text(json, std::string(deepseek_version_name(version)))).first;
  }
  return it->second;
}

}  // namespace dsinfer::tokenizer::testing
