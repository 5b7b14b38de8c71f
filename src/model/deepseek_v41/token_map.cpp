#include "model/deepseek_v41/token_map.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "model/deepseek_v41/engram_normalize.h"

namespace dsinfer::model::deepseek_v41 {

int64_t EngramTokenMap::compressed(int64_t token) const {
  DSINFER_CHECK(token >= 0 && token < static_cast<int64_t>(map.size()), "Engram: token ", token,
                " has no compressed id (the token map has ", map.size(), " entries)");
  return map[static_cast<size_t>(token)];
}

EngramTokenMap parse_engram_token_map(const std::string& text, const std::string& source, const ModelConfig& config) {
  DSINFER_CHECK(config.engram.has_value(), source, ": the config has no Engram layers");
  const int64_t want = config.engram->compressed_vocab_size;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    core::fail(source, ": invalid JSON: ", e.what());
  }
  DSINFER_CHECK(j.is_object() && j.contains("token_map") && j.at("token_map").is_array() &&
                    j.contains("compressed_vocab_size") && j.at("compressed_vocab_size").is_number_integer(),
                source, ": expected {\"compressed_vocab_size\": N, \"token_map\": [ids]}");
  const int64_t declared = j.at("compressed_vocab_size").get<int64_t>();
  DSINFER_CHECK(declared == want, source, ": compressed_vocab_size ", declared,
                " differs from the config's engram_compressed_vocab_size ", want,
                " (every hash multiplier depends on it, model-v41.md §5)");
  const auto& arr = j.at("token_map");
  DSINFER_CHECK(static_cast<int64_t>(arr.size()) <= config.vocab_size, source, ": ", arr.size(),
                " entries, more than vocab_size ", config.vocab_size);
  EngramTokenMap m;
  m.map.reserve(arr.size());
  int64_t next_new = 0;
  for (size_t t = 0; t < arr.size(); ++t) {
    DSINFER_CHECK(arr[t].is_number_integer(), source, ": token_map[", t, "] is not an integer");
    const int64_t id = arr[t].get<int64_t>();
    DSINFER_CHECK(id >= 0 && id <= next_new, source, ": token_map[", t, "] = ", id,
                  ": ids must be numbered in order of first appearance (next new id ", next_new, ")");
    if (id == next_new) ++next_new;
    m.map.push_back(id);
  }
  DSINFER_CHECK(next_new == want, source, ": ", next_new, " distinct compressed ids, the config says ", want);
  m.compressed_vocab = next_new;
  DSINFER_CHECK(config.engram->pad_token_id < static_cast<int64_t>(m.map.size()), source,
                ": no entry for the Engram pad token ", config.engram->pad_token_id);
  return m;
}

EngramTokenMap derive_engram_token_map(const tokenizer::Tokenizer& tok) {
  EngramTokenMap m;
  const int32_t n = tok.vocab_size();
  m.map.reserve(static_cast<size_t>(n));
  std::unordered_map<std::string, int64_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) {
    const int32_t one[] = {t};
    const std::string text = tok.decode(one, /*skip_special_tokens=*/false);
    std::string key;
    if (text.find("\xEF\xBF\xBD") != std::string::npos) {  // U+FFFD
      key = std::string(tok.id_to_token(t).value_or(""));
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    const auto [it, inserted] = ids.emplace(std::move(key), static_cast<int64_t>(ids.size()));
    m.map.push_back(it->second);
  }
  m.compressed_vocab = static_cast<int64_t>(ids.size());
  return m;
}

std::string engram_token_map_json(const EngramTokenMap& map) {
  nlohmann::json j;
  j["compressed_vocab_size"] = map.compressed_vocab;
  j["token_map"] = map.map;
  return j.dump();
}

EngramTokenMap load_engram_token_map(const std::string& model_dir, const ModelConfig& config) {
  DSINFER_CHECK(config.engram.has_value(), "checkpoint ", model_dir, ": the config has no Engram layers");
  const std::string path = model_dir + "/engram_token_map.json";
  if (!std::filesystem::is_regular_file(path)) {
    const std::string tokenizer_path = model_dir + "/tokenizer.json";
    DSINFER_CHECK(std::filesystem::is_regular_file(tokenizer_path), "checkpoint ", model_dir,
                  ": neither engram_token_map.json nor tokenizer.json, one of which the Engram compressed-token ",
                  "map is made from (model-v41.md §5)");
    EngramTokenMap m = derive_engram_token_map(tokenizer::Tokenizer::from_file(tokenizer_path));
    const int64_t want = config.engram->compressed_vocab_size;
    DSINFER_CHECK(m.compressed_vocab == want, tokenizer_path, ": the Engram compressed-token map has ",
                  m.compressed_vocab, " distinct ids, the config's engram_compressed_vocab_size is ", want,
                  " (model-v41.md §5; the reference refuses to load too)");
    DSINFER_CHECK(static_cast<int64_t>(m.map.size()) <= config.vocab_size, tokenizer_path, ": ", m.map.size(),
                  " tokens, more than vocab_size ", config.vocab_size);
    DSINFER_CHECK(config.engram->pad_token_id < static_cast<int64_t>(m.map.size()), tokenizer_path,
                  ": no entry for the Engram pad token ", config.engram->pad_token_id);
    return m;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  DSINFER_CHECK(in.good() || in.eof(), "cannot read ", path);
  return parse_engram_token_map(ss.str(), path, config);
}

}  // namespace dsinfer::model::deepseek_v41
