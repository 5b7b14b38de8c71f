// Loading errors surface as core::Error naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <cstring>
#include <fstream>

#include "model/safetensors.h"
#include "test_models.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

namespace fs = std::filesystem;

// A private copy of the tiny512 checkpoint with `bytes` written over tensor `name` at element `index`.
std::string corrupted_copy(const std::string& tag, const std::string& name, size_t byte_offset,
                           const std::vector<uint8_t>& bytes) {
  const std::string src = testing::make_test_model("tiny512", testing::tiny_config());
  const fs::path dst = fs::path(src).parent_path() / ("corrupt_" + tag);
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(src)) fs::copy_file(e.path(), dst / e.path().filename(), fs::copy_options::overwrite_existing);
  uint64_t offset = 0;
  {
    SafetensorsFile f((dst / "model.safetensors").string());
    offset = f.get(name).file_offset + byte_offset;
  }
  std::fstream io(dst / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(static_cast<std::streamoff>(offset));
  io.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return dst.string();
}

std::string load_error(const std::string& dir) {
  try {
    Model::load(dir);
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(V4Load, MissingDirectory) {
  EXPECT_NE(load_error("/nonexistent/dsinfer/model"), "");
}

TEST(V4Load, HashTableWithInvalidExpertId) {
  const int64_t bad = 999;
  std::vector<uint8_t> bytes(8);
  std::memcpy(bytes.data(), &bad, 8);
  const std::string msg = load_error(corrupted_copy("tid2eid", "layers.1.ffn.gate.tid2eid", 8 * 13, bytes));
  EXPECT_NE(msg.find("tid2eid"), std::string::npos) << msg;
  EXPECT_NE(msg.find("999"), std::string::npos) << msg;
}

TEST(V4Load, NanWeightCodeNamesTheTensor) {
  const std::string msg = load_error(corrupted_copy("nan", "layers.2.attn.wq_a.weight", 5, {0x7F}));
  EXPECT_NE(msg.find("layers.2.attn.wq_a"), std::string::npos) << msg;
}

// The routed experts are packed in parallel: an invalid one still fails the load naming itself.
TEST(V4Load, InvalidExpertScaleNamesTheExpert) {
  const std::string msg = load_error(corrupted_copy("expert_scale", "layers.1.ffn.experts.5.w2.scale", 3, {0xFF}));
  EXPECT_NE(msg.find("layers.1.ffn.experts.5.w2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0xFF"), std::string::npos) << msg;
}

TEST(V4Load, MissingTensorIsReported) {
  // A config with one more layer than the checkpoint holds.
  const std::string src = testing::make_test_model("tiny512", testing::tiny_config());
  const fs::path dst = fs::path(src).parent_path() / "missing_layer";
  fs::create_directories(dst);
  fs::copy_file(fs::path(src) / "model.safetensors", dst / "model.safetensors", fs::copy_options::overwrite_existing);
  auto cfg = testing::tiny_config();
  cfg["num_hidden_layers"] = 8;
  cfg["compress_ratios"] = {0, 0, 4, 32, 4, 32, 4, 32, 0};
  std::ofstream(dst / "config.json") << cfg.dump();
  const std::string msg = load_error(dst.string());
  EXPECT_NE(msg.find("layers.7"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
