// Small synthetic DeepSeek-V4 checkpoints for the forward-pass tests, made once per process with the
// mkmodel library in a temporary directory, and helpers to run token sequences through them.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/deepseek_v4/model.h"
#include "model/mkmodel.h"

namespace dsinfer::model::deepseek_v4::testing {

// The shared TINY config with a small vocabulary (every feature: SWA, CSA with top-k pruning, HCA ratio
// 32, hash and scored MoE, MTP), or with overrides.
inline nlohmann::json tiny_config(int64_t vocab = 512) {
  std::ifstream in(std::string(DSINFER_SOURCE_DIR) + "/configs/tiny.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["vocab_size"] = vocab;
  return c;
}

// Writes the config and a checkpoint for it under a per-process temp directory; cached by name.
inline std::string make_test_model(const std::string& name, const nlohmann::json& config, uint64_t seed = 7) {
  namespace fs = std::filesystem;
  const fs::path base = fs::temp_directory_path() / ("dsinfer_v4_test_" + std::to_string(::getpid()));
  const fs::path dir = base / name;
  if (fs::exists(dir / "config.json")) return dir.string();
  fs::create_directories(dir);
  const fs::path cfg = base / (name + ".json");
  std::ofstream(cfg) << config.dump(2);
  MkModelOptions opt;
  opt.config_path = cfg.string();
  opt.out_dir = dir.string();
  opt.seed = seed;
  opt.tokenizer_dir = std::nullopt;
  make_model(opt);
  return dir.string();
}

// A test suite sharing one TINY model (vocabulary 512), loaded once per suite with two threads.
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(make_test_model("tiny512", tiny_config()));
    ModelOptions opt;
    opt.threads = 2;
    model_ = Model::load(*dir_, opt).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    delete dir_;
    model_ = nullptr;
    dir_ = nullptr;
  }
  static inline std::string* dir_ = nullptr;
  static inline Model* model_ = nullptr;
};

inline std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

// Feeds tokens[begin, end) in chunks of the given sizes (cycled) and returns all logits rows.
inline std::vector<float> run_chunks(Model& m, SequenceState& st, const std::vector<int32_t>& tokens, int64_t begin,
                                     int64_t end, const std::vector<int64_t>& chunks) {
  std::vector<float> all;
  std::vector<SequenceOutput> out(1);
  size_t c = 0;
  for (int64_t b = begin; b < end;) {
    const int64_t n = std::min(chunks[c++ % chunks.size()], end - b);
    SequenceInput in;
    in.state = &st;
    in.tokens = std::span<const int32_t>(tokens.data() + b, n);
    in.logits = LogitRows::kAll;
    m.forward({&in, 1}, out);
    all.insert(all.end(), out[0].logits.begin(), out[0].logits.end());
    b += n;
  }
  return all;
}

// Index of the first differing element, or -1.
inline int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace dsinfer::model::deepseek_v4::testing
