// A small byte-level BPE tokenizer.json written by the tests themselves: ids 0..255 are the 256
// ByteLevel characters (id = byte value), then the merges below, then any added tokens.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace dsinfer::tokenizer::testing {

struct SyntheticSpec {
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes
  bool merges_as_pairs = false;
  nlohmann::json added_tokens = nlohmann::json::array();
  nlohmann::json pre_tokenizer = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
};

inline std::string synthetic_tokenizer_json(const SyntheticSpec& spec) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    vocab[byte_level::encode(std::string(1, c))] = b;
  }
  nlohmann::json merges = nlohmann::json::array();
  int next = 256;
  for (const auto& [a, b] : spec.merges) {
    const std::string sa = byte_level::encode(a), sb = byte_level::encode(b);
    if (!vocab.contains(sa + sb)) vocab[sa + sb] = next++;
    if (spec.merges_as_pairs) merges.push_back({sa, sb});
    else merges.push_back(sa + " " + sb);
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", spec.added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", spec.pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
  return j.dump();
}

inline nlohmann::json added(int id, const std::string& content, bool special, bool normalized, bool lstrip = false,
                            bool rstrip = false, bool single_word = false) {
  return {{"id", id},         {"content", content},         {"special", special}, {"normalized", normalized},
          {"lstrip", lstrip}, {"rstrip", rstrip}, {"single_word", single_word}};
}

}  // namespace dsinfer::tokenizer::testing
