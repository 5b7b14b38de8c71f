#include "model/checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtypes.h"
#include "kernels/cpu/linear.h"
#include "model/mkmodel.h"
#include "test_util.h"

namespace dsinfer::model {
namespace {

using core::DType;
using testing::error_of;
using testing::TempDir;

// A synthetic checkpoint of the small test config in DIR/model (sharded when shard_bytes > 0).
std::string make_checkpoint(const TempDir& dir, uint64_t shard_bytes = 0, nlohmann::json config = testing::small_config()) {
  MkModelOptions o;
  o.config_path = testing::write_config(dir, config, "src_config.json");
  o.out_dir = dir.file("model");
  o.seed = 7;
  o.shard_size_bytes = shard_bytes;
  o.tokenizer_dir.reset();
  ::setenv("DSINFER_HOME", dir.file("no_home").c_str(), 1);  // no default tokenizer
  make_model(o);
  return o.out_dir;
}

// Rewrites DIR/model.safetensors after applying edit to its tensors.
void rewrite(const std::string& model_dir, const std::function<void(std::vector<TensorData>&)>& edit) {
  const std::string path = model_dir + "/model.safetensors";
  auto tensors = testing::load_all(path);
  edit(tensors);
  write_safetensors(path, tensors, {{"format", "pt"}});
}

TensorData* find(std::vector<TensorData>& ts, const std::string& name) {
  for (auto& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

void expect_contains(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(Checkpoint, OpensAValidCheckpointAndChecksTheInventory) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  auto ck = Checkpoint::open(m);
  EXPECT_EQ(ck->config().hidden_size, 128);
  EXPECT_EQ(ck->files().size(), 1u);
  const InventoryReport r = ck->check_inventory();
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.expected_count, expected_tensors(ck->config()).size());
  EXPECT_EQ(r.found_count, r.expected_count);
  EXPECT_EQ(ck->size(), r.expected_count);

  const TensorView& e = ck->get("embed.weight", DType::kBF16, {512, 128});
  EXPECT_EQ(*e.file, m + "/model.safetensors");
  EXPECT_EQ(ck->get_expected("layers.1.ffn.gate.tid2eid").dtype, DType::kI64);
}

TEST(Checkpoint, LinearViewsForEveryStorage) {
  TempDir dir;
  auto ck = Checkpoint::open(make_checkpoint(dir));
  const kernels::WeightView fp8 = ck->linear("layers.0.attn.wq_b");
  EXPECT_EQ(fp8.format, kernels::WeightFormat::kFP8);
  EXPECT_EQ(fp8.rows, 256);
  EXPECT_EQ(fp8.cols, 128);
  EXPECT_FALSE(fp8.scales_f32);
  EXPECT_EQ(fp8.data, ck->get("layers.0.attn.wq_b.weight").data);
  EXPECT_EQ(fp8.scales, ck->get("layers.0.attn.wq_b.scale").data);
  const kernels::WeightView fp4 = ck->linear("layers.2.ffn.experts.1.w2");
  EXPECT_EQ(fp4.format, kernels::WeightFormat::kFP4);
  EXPECT_EQ(fp4.rows, 128);
  EXPECT_EQ(fp4.cols, 128);
  const kernels::WeightView bf = ck->linear("layers.1.attn.compressor.wgate");
  EXPECT_EQ(bf.format, kernels::WeightFormat::kBF16);
  EXPECT_EQ(bf.rows, 256);  // CSA overlap: 2 x head_dim
  EXPECT_EQ(bf.scales, nullptr);
  EXPECT_EQ(ck->linear("head").rows, 512);

  // weight_at decodes exactly what the file holds: FP8 code x E8M0 scale of block [r/128][c/128].
  const TensorView& w = ck->get("layers.0.attn.wq_b.weight");
  const TensorView& s = ck->get("layers.0.attn.wq_b.scale");
  for (int64_t r : {0, 127, 128, 255}) {
    for (int64_t c : {0, 5, 127}) {
      const float expected = core::fp8_e4m3_to_float(w.data[r * 128 + c]) * core::e8m0_to_float(s.data[(r / 128) * 1]);
      EXPECT_EQ(kernels::weight_at(fp8, r, c), expected) << r << "," << c;
    }
  }

  const std::string wrong = error_of([&] { ck->linear("layers.0.attn.wq_b", 256, 256); });
  expect_contains(wrong, {"layers.0.attn.wq_b", "[256, 256]", "found [256, 128]", "model.safetensors"});
  expect_contains(error_of([&] { ck->linear("layers.0.attn.q_norm"); }), {"not a linear"});
  expect_contains(error_of([&] { ck->linear("layers.9.attn.wq_a", 1, 1); }), {"missing tensor 'layers.9.attn.wq_a.weight'"});
}

TEST(Checkpoint, CheckedGetNamesFileTensorAndBothLayouts) {
  TempDir dir;
  auto ck = Checkpoint::open(make_checkpoint(dir));
  const std::string msg = error_of([&] { ck->get("norm.weight", DType::kF32, {128}); });
  expect_contains(msg, {"'norm.weight'", "model.safetensors", "expected F32 [128]", "found BF16 [128]"});
  expect_contains(error_of([&] { ck->get("norm.weight", DType::kBF16, {256}); }), {"expected BF16 [256]", "found BF16 [128]"});
  expect_contains(error_of([&] { ck->get("nope.weight"); }), {"missing tensor 'nope.weight'"});
}

TEST(Checkpoint, MissingTensor) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  rewrite(m, [](std::vector<TensorData>& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const TensorData& t) { return t.name == "layers.3.attn.wkv.scale"; }),
             ts.end());
  });
  const std::string msg = error_of([&] { Checkpoint::open(m); });
  expect_contains(msg, {m, "missing (1)", "layers.3.attn.wkv.scale"});
}

TEST(Checkpoint, ExtraTensorIsReportedAndCanBeAllowed) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  rewrite(m, [](std::vector<TensorData>& ts) { ts.push_back({"layers.0.attn.bogus", DType::kF32, {2}, std::vector<uint8_t>(8)}); });
  expect_contains(error_of([&] { Checkpoint::open(m); }), {"unexpected extra tensors (1)", "layers.0.attn.bogus"});
  CheckpointOptions o;
  o.allow_extra = true;
  auto ck = Checkpoint::open(m, o);
  EXPECT_EQ(ck->check_inventory().extra.size(), 1u);
  EXPECT_NE(ck->find("layers.0.attn.bogus"), nullptr);
}

// A config that claims more layers or experts than the files hold is named before an inventory of its
// size is built (a config with 1e8 experts made inspect grow to 4.6 GB).
TEST(Checkpoint, ConfigCountsBeyondTheFilesAreNamed) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  nlohmann::json c = testing::small_config();
  c["n_routed_experts"] = 4000;
  testing::write_config(dir, c, "model/config.json");
  CheckpointOptions inspect;
  inspect.check_inventory = false;  // as `dsinfer inspect` opens it
  expect_contains(error_of([&] { Checkpoint::open(m, inspect); }),
                  {"'n_routed_experts' (4000)", "disagrees with the checkpoint", "4 routed experts",
                   "ffn.experts.4 .. ffn.experts.3999 are missing"});
  c = testing::small_config();
  c["num_hidden_layers"] = 200;
  c["compress_ratios"] = std::vector<int64_t>(201, 0);
  c["num_hash_layers"] = 0;
  testing::write_config(dir, c, "model/config.json");
  expect_contains(error_of([&] { Checkpoint::open(m, inspect); }), {"'num_hidden_layers' (200)", "4 layers"});
  c = testing::small_config();
  c["n_mtp_layers"] = 2;
  c["compress_ratios"] = {0, 4, 8, 4, 0, 0};
  testing::write_config(dir, c, "model/config.json");
  expect_contains(error_of([&] { Checkpoint::open(m, inspect); }), {"'n_mtp_layers' (2)", "1 MTP stages", "mtp.1 is missing"});
}

TEST(Checkpoint, WrongShape) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  rewrite(m, [](std::vector<TensorData>& ts) {
    TensorData* t = find(ts, "layers.1.attn.attn_sink");
    t->shape = {1, 2};
  });
  expect_contains(error_of([&] { Checkpoint::open(m); }),
                  {"wrong dtype or shape (1)", "layers.1.attn.attn_sink: expected F32 [2], found F32 [1, 2]"});
}

TEST(Checkpoint, WrongDtype) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  rewrite(m, [](std::vector<TensorData>& ts) {
    TensorData* t = find(ts, "layers.0.ffn.experts.0.w1.weight");
    t->dtype = DType::kU8;
  });
  expect_contains(error_of([&] { Checkpoint::open(m); }),
                  {"layers.0.ffn.experts.0.w1.weight: expected I8 [128, 64], found U8 [128, 64]"});
}

TEST(Checkpoint, F32ScalesAreAccepted) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  std::vector<float> before;
  {
    auto ck = Checkpoint::open(m);
    const auto v = ck->linear("layers.0.ffn.shared_experts.w2");
    for (int64_t r = 0; r < v.rows; r += 17) before.push_back(kernels::weight_at(v, r, r % v.cols));
  }
  rewrite(m, [](std::vector<TensorData>& ts) {
    TensorData* s = find(ts, "layers.0.ffn.shared_experts.w2.scale");
    std::vector<uint8_t> f32(s->bytes.size() * 4);
    for (size_t i = 0; i < s->bytes.size(); ++i) {
      const float v = core::e8m0_to_float(s->bytes[i]);
      std::memcpy(&f32[i * 4], &v, 4);
    }
    s->dtype = DType::kF32;
    s->bytes = f32;
  });
  auto ck = Checkpoint::open(m);
  const auto v = ck->linear("layers.0.ffn.shared_experts.w2");
  EXPECT_TRUE(v.scales_f32);
  size_t i = 0;
  for (int64_t r = 0; r < v.rows; r += 17) EXPECT_EQ(kernels::weight_at(v, r, r % v.cols), before[i++]);
}

TEST(Checkpoint, TruncatedFile) {
  TempDir dir;
  const std::string m = make_checkpoint(dir);
  const std::string f = m + "/model.safetensors";
  std::filesystem::resize_file(f, std::filesystem::file_size(f) - 100);
  expect_contains(error_of([&] { Checkpoint::open(m); }), {f, "truncated"});
}

TEST(Checkpoint, MissingConfigOrWeights) {
  TempDir dir;
  expect_contains(error_of([&] { Checkpoint::open(dir.path()); }), {dir.path(), "no config.json"});
  testing::write_config(dir, testing::small_config());
  expect_contains(error_of([&] { Checkpoint::open(dir.path()); }),
                  {"neither model.safetensors nor model.safetensors.index.json"});
  // A config that violates a constraint fails with the config's own message.
  auto bad = testing::small_config();
  bad["sliding_window"] = 2;
  testing::write_config(dir, bad);
  expect_contains(error_of([&] { Checkpoint::open(dir.path()); }), {"config.json", "'sliding_window'"});
}

TEST(Checkpoint, ShardedCheckpoint) {
  TempDir dir;
  const std::string m = make_checkpoint(dir, 256 << 10);
  auto ck = Checkpoint::open(m);
  EXPECT_GT(ck->files().size(), 3u);
  EXPECT_TRUE(ck->check_inventory().ok());
  const std::string last = ck->get("mtp.0.hc_head_fn").file->substr(m.size() + 1);
  char expected_last[64];
  std::snprintf(expected_last, sizeof(expected_last), "model-%05zu-of-%05zu.safetensors", ck->files().size(),
                ck->files().size());
  EXPECT_EQ(last, expected_last);
  EXPECT_FALSE(std::filesystem::exists(m + "/model.safetensors"));
}

TEST(Checkpoint, ShardIndexInconsistencies) {
  TempDir dir;
  const std::string m = make_checkpoint(dir, 256 << 10);
  const std::string index_path = m + "/model.safetensors.index.json";
  const auto index = nlohmann::json::parse(testing::read_bytes(index_path));

  {  // a tensor the index places in the wrong shard
    auto j = index;
    j["weight_map"]["embed.weight"] = "model-00002-of-" + std::string(j["weight_map"]["embed.weight"]).substr(15);
    testing::write_bytes(index_path, j.dump());
    expect_contains(error_of([&] { Checkpoint::open(m); }), {"puts 'embed.weight' in model-00002", "but it is in model-00001"});
  }
  {  // a shard that does not exist
    auto j = index;
    j["weight_map"]["norm.weight"] = "model-00099-of-00099.safetensors";
    testing::write_bytes(index_path, j.dump());
    expect_contains(error_of([&] { Checkpoint::open(m); }), {"shard 'model-00099-of-00099.safetensors'", "does not exist"});
  }
  {  // a tensor in a shard but not in the index
    auto j = index;
    j["weight_map"].erase("norm.weight");
    testing::write_bytes(index_path, j.dump());
    expect_contains(error_of([&] { Checkpoint::open(m); }), {"'norm.weight'", "not listed in model.safetensors.index.json"});
  }
  {  // an index entry no shard holds
    auto j = index;
    j["weight_map"]["layers.0.ghost"] = j["weight_map"]["norm.weight"];
    testing::write_bytes(index_path, j.dump());
    expect_contains(error_of([&] { Checkpoint::open(m); }), {"lists 'layers.0.ghost'", "does not contain it"});
  }
  {
    testing::write_bytes(index_path, "{\"weight_map\": ");
    expect_contains(error_of([&] { Checkpoint::open(m); }), {index_path, "invalid JSON"});
  }
  {
    testing::write_bytes(index_path, "{\"weight_map\": {\"norm.weight\": \"../x.safetensors\"}}");
    expect_contains(error_of([&] { Checkpoint::open(m); }), {"bad file '../x.safetensors'"});
  }
}

TEST(Checkpoint, TouchReportsMonotoneProgressToTheTotal) {
  TempDir dir;
  auto ck = Checkpoint::open(make_checkpoint(dir, 256 << 10));
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  const uint64_t n = ck->touch([&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(n, ck->total_bytes());
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front().first, 0u);
  EXPECT_EQ(calls.back().first, ck->total_bytes());
  for (size_t i = 1; i < calls.size(); ++i) {
    EXPECT_GE(calls[i].first, calls[i - 1].first);
    EXPECT_EQ(calls[i].second, ck->total_bytes());
  }
  // The same through open().
  CheckpointOptions o;
  uint64_t last = 0, calls_open = 0;
  o.progress = [&](uint64_t done, uint64_t) {
    last = done;
    ++calls_open;
  };
  auto again = Checkpoint::open(ck->dir(), o);
  EXPECT_GE(calls_open, 2u);
  EXPECT_EQ(last, again->total_bytes());
}

}  // namespace
}  // namespace dsinfer::model
