// mkmodel on V4.1 configs (model-v41.md §4): the official layout with 32x32 FP8 blocks, per-row x 32
// Engram table scales and the engram_token_map.json sidecar, opened again by the loader (what
// `dsinfer inspect` does).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtypes.h"
#include "kernels/cpu/linear.h"
#include "model/checkpoint.h"
#include "model/mkmodel.h"
#include "test_util.h"

namespace dsinfer::model {
namespace {

using core::DType;
using testing::error_of;
using testing::TempDir;

MkModelOptions v41_options(const TempDir& dir, const nlohmann::json& config, uint64_t seed, const std::string& out) {
  ::setenv("DSINFER_HOME", dir.file("no_home").c_str(), 1);  // no default tokenizer
  MkModelOptions o;
  o.config_path = testing::write_config(dir, config, "src_" + out + ".json");
  o.out_dir = dir.file(out);
  o.seed = seed;
  return o;
}

// |E4M3 code| as a value (no scale).
double e4m3_magnitude(uint8_t code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
}

TEST(MkModelV41, CheckpointOpensAndMatchesTheInventory) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 7, "m");
  const MkModelResult r = make_model(o);
  CheckpointOptions copt;
  copt.check_inventory = false;  // as `dsinfer inspect`: report instead of failing
  auto ck = Checkpoint::open(o.out_dir, copt);
  const InventoryReport report = ck->check_inventory();
  EXPECT_TRUE(report.ok()) << report.describe();
  EXPECT_EQ(report.found_count, r.tensors);
  EXPECT_EQ(ck->config().arch, Architecture::kDeepseekV41);
  EXPECT_NE(ck->config().summary().find("DeepseekV41ForCausalLM"), std::string::npos);
  // The strict open (what the loaders use) accepts it too.
  EXPECT_NO_THROW(Checkpoint::open(o.out_dir));
  // Written from the spec's layout (§4.2), not from the inventory: no hc_head, DSpark Markov tensors.
  EXPECT_EQ(ck->find("hc_head_fn"), nullptr);
  EXPECT_EQ(ck->find("layers.3.attn.compressor.wkv.weight"), nullptr);
  EXPECT_EQ(ck->find("layers.6.attn.compressor.wgate.weight"), nullptr);
  EXPECT_NE(ck->find("layers.4.attn.compressor.wgate.weight"), nullptr);
  EXPECT_EQ(ck->get("mtp.2.markov_head.embed.weight").shape, (std::vector<int64_t>{512, 16}));
  EXPECT_EQ(ck->get("mtp.0.ffn.gate.weight").shape, (std::vector<int64_t>{2, 128}));
  EXPECT_EQ(ck->get("layers.9.ffn.gate.bias_vl").shape, (std::vector<int64_t>{4}));
}

// FP8 weights: one scale per 32 x 32 block, each the smallest power of two that holds the block's amax
// (so the largest code of every block lies in [448/2, 448]).
TEST(MkModelV41, Fp8WeightsHaveTight32x32Blocks) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 3, "b");
  make_model(o);
  SafetensorsFile f(o.out_dir + "/model.safetensors");
  for (const char* name : {"layers.0.attn.wq_b", "layers.4.engram.wkv", "mtp.0.main_proj", "layers.2.attn.wo_b"}) {
    const TensorView& w = f.get(std::string(name) + ".weight");
    const TensorView& s = f.get(std::string(name) + ".scale");
    const int64_t rows = w.shape[0], cols = w.shape[1];
    ASSERT_EQ(s.shape, (std::vector<int64_t>{(rows + 31) / 32, (cols + 31) / 32})) << name;
    for (int64_t rb = 0; rb < s.shape[0]; ++rb) {
      for (int64_t cb = 0; cb < s.shape[1]; ++cb) {
        double amax = 0;
        for (int64_t r = rb * 32; r < std::min(rows, rb * 32 + 32); ++r) {
          for (int64_t c = cb * 32; c < std::min(cols, cb * 32 + 32); ++c) {
            amax = std::max(amax, e4m3_magnitude(w.data[r * cols + c]));
          }
        }
        ASSERT_GE(amax, 224.0) << name << " block " << rb << "," << cb;
        ASSERT_LE(amax, 448.0) << name << " block " << rb << "," << cb;
      }
    }
  }
}

// The Engram table: FP8 [rows, head_dim] with one E8M0 scale per row and 32 columns (§4.3), tight in
// the same sense; values N(0, 1) before quantization.
TEST(MkModelV41, EngramTableHasPerRowScales) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 3, "e");
  make_model(o);
  SafetensorsFile f(o.out_dir + "/model.safetensors");
  const TensorView& t = f.get("layers.4.engram.embed.weight");
  const TensorView& s = f.get("layers.4.engram.embed.scale");
  ASSERT_EQ(t.dtype, DType::kF8E4M3);
  ASSERT_EQ(s.dtype, DType::kF8E8M0);
  ASSERT_EQ(t.shape, (std::vector<int64_t>{306, 32}));
  ASSERT_EQ(s.shape, (std::vector<int64_t>{306, 1}));
  double sum_sq = 0;
  for (int64_t r = 0; r < 306; ++r) {
    double amax = 0;
    for (int64_t c = 0; c < 32; ++c) {
      const uint8_t code = t.data[r * 32 + c];
      amax = std::max(amax, e4m3_magnitude(code));
      const double v = e4m3_magnitude(code) * std::ldexp(1.0, int(s.data[r]) - 127);
      sum_sq += v * v;
    }
    ASSERT_GE(amax, 224.0) << "row " << r;
    ASSERT_LE(amax, 448.0) << "row " << r;
  }
  const double rms = std::sqrt(sum_sq / (306 * 32));
  EXPECT_GT(rms, 0.9);
  EXPECT_LT(rms, 1.1);
}

// engram_token_map.json (§5 sidecar): one id per token, exactly compressed_vocab_size distinct ids, in
// order of first appearance, pad token 2 -> 2.
TEST(MkModelV41, EngramTokenMapSidecar) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 11, "t");
  make_model(o);
  const auto j = nlohmann::json::parse(testing::read_bytes(o.out_dir + "/engram_token_map.json"));
  EXPECT_EQ(j.at("compressed_vocab_size").get<int64_t>(), 300);
  const auto map = j.at("token_map").get<std::vector<int64_t>>();
  ASSERT_EQ(map.size(), 512u);
  std::set<int64_t> seen;
  int64_t next_new = 0;
  for (int64_t id : map) {
    ASSERT_GE(id, 0);
    if (!seen.count(id)) {
      EXPECT_EQ(id, next_new) << "ids must appear in order";
      ++next_new;
      seen.insert(id);
    }
  }
  EXPECT_EQ(seen.size(), 300u);
  EXPECT_EQ(map[2], 2);
  // A V4 checkpoint written into the same folder drops the stale sidecar.
  auto v4 = v41_options(dir, testing::small_config(), 1, "t");
  make_model(v4);
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/engram_token_map.json"));
}

// The loader hands V4.1's FP8 linears to the kernels with their 32x32 scale blocks (they were refused
// while the kernels read 128x128 only): the packed product equals the sum over the weights decoded here
// from the file's codes and the scale of each one's 32x32 block, within fp32 summation error.
TEST(MkModelV41, Fp8LinearsCarryTheir32x32Blocks) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 1, "k");
  make_model(o);
  auto ck = Checkpoint::open(o.out_dir);
  const kernels::WeightView v = ck->linear("layers.0.attn.wq_a");
  ASSERT_EQ(v.format, kernels::WeightFormat::kFP8);
  EXPECT_EQ(v.fp8_block, 32);
  const TensorView& w = ck->get("layers.0.attn.wq_a.weight");
  const TensorView& sc = ck->get("layers.0.attn.wq_a.scale");
  const int64_t rows = v.rows, cols = v.cols, scale_cols = (cols + 31) / 32;
  ASSERT_EQ(sc.shape, (std::vector<int64_t>{(rows + 31) / 32, scale_cols}));
  std::vector<float> x(2 * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  std::vector<float> y(2 * rows);
  kernels::Linear(v).forward(x.data(), 2, cols, y.data(), rows, nullptr);
  for (int64_t m = 0; m < 2; ++m) {
    for (int64_t n = 0; n < rows; ++n) {
      double exact = 0, mag = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const int64_t at = (n / 32) * scale_cols + k / 32;
        const float s = sc.dtype == DType::kF32 ? sc.as<float>()[at] : core::e8m0_to_float(sc.data[at]);
        const double p = static_cast<double>(x[m * cols + k]) * core::fp8_e4m3_to_float(w.data[n * cols + k]) * s;
        exact += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(y[m * rows + n], exact, 1.01 * (cols + 1) * std::ldexp(1.0, -24) * mag + 1e-30) << m << " " << n;
    }
  }
  // BF16 and FP4 linears are unaffected by the FP8 block size.
  EXPECT_EQ(ck->linear("layers.2.attn.compressor.wkv").rows, 128);
  EXPECT_EQ(ck->linear("layers.0.ffn.experts.1.w2").cols, 64);
}

TEST(MkModelV41, DefaultTokenizerFolderFollowsTheArchitecture) {
  TempDir dir;
  ::setenv("DSINFER_HOME", dir.file("home").c_str(), 1);
  EXPECT_EQ(default_tokenizer_dir(Architecture::kDeepseekV41), dir.file("home") + "/tokenizers/v41");
  EXPECT_EQ(default_tokenizer_dir(Architecture::kDeepseekV4), dir.file("home") + "/tokenizers/v4");
}

}  // namespace
}  // namespace dsinfer::model

namespace dsinfer::model {
namespace {

// A release with its vision tower (vision_config.num_hidden_layers 32) holds vision.*, aligner.* and
// image_* tensors: a text-only engine skips them by name (model-v41.md §8 item 16); any other extra
// tensor is still an error.
TEST(MkModelV41, VisionTensorsAreSkippedOtherExtrasAreNot) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 2, "v");
  make_model(o);
  const std::string path = o.out_dir + "/model.safetensors";
  auto tensors = testing::load_all(path);
  for (const char* name : {"vision.patch_embed.weight", "aligner.proj.weight", "image_newline"}) {
    tensors.push_back({name, DType::kBF16, {4}, std::vector<uint8_t>(8, 0)});
  }
  write_safetensors(path, tensors, {{"format", "pt"}});
  std::unique_ptr<Checkpoint> ck;
  ASSERT_NO_THROW(ck = Checkpoint::open(o.out_dir));
  const InventoryReport r = ck->check_inventory();
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.ignored_vision, 3u);
  EXPECT_NE(r.describe().find("3 vision tensors ignored"), std::string::npos) << r.describe();

  tensors.push_back({"visionary.weight", DType::kBF16, {4}, std::vector<uint8_t>(8, 0)});
  write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string msg = error_of([&] { Checkpoint::open(o.out_dir); });
  EXPECT_NE(msg.find("visionary.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::model

namespace dsinfer::model {
namespace {

// model-v41.md §4.3: norms may be stored F32 instead of BF16 (V4.1 only); other dtype changes are not.
TEST(MkModelV41, F32NormsAreAccepted) {
  TempDir dir;
  auto o = v41_options(dir, testing::small_v41_config(), 2, "n");
  make_model(o);
  const std::string path = o.out_dir + "/model.safetensors";
  auto tensors = testing::load_all(path);
  for (auto& t : tensors) {
    if (t.name == "layers.3.attn_norm.weight") {
      std::vector<uint8_t> f32(t.bytes.size() * 2);
      for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
        const float v = core::bf16_to_float(static_cast<uint16_t>(t.bytes[2 * i] | (t.bytes[2 * i + 1] << 8)));
        std::memcpy(f32.data() + 4 * i, &v, 4);
      }
      t.dtype = DType::kF32;
      t.bytes = f32;
    }
  }
  write_safetensors(path, tensors, {{"format", "pt"}});
  EXPECT_NO_THROW(Checkpoint::open(o.out_dir));
  for (auto& t : tensors) {
    if (t.name == "layers.3.attn.attn_sink") {  // F32 by the spec: BF16 is refused
      t.dtype = DType::kBF16;
      t.shape = {static_cast<int64_t>(t.bytes.size() / 2)};
    }
  }
  write_safetensors(path, tensors, {{"format", "pt"}});
  const std::string msg = error_of([&] { Checkpoint::open(o.out_dir); });
  EXPECT_NE(msg.find("layers.3.attn.attn_sink"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::model
