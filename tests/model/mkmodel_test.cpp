#include "model/mkmodel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtypes.h"
#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "test_util.h"

namespace dsinfer::model {
namespace {

using core::DType;
using testing::error_of;
using testing::TempDir;

MkModelOptions options(const TempDir& dir, const nlohmann::json& config, uint64_t seed, const std::string& out) {
  ::setenv("DSINFER_HOME", dir.file("no_home").c_str(), 1);  // no default tokenizer unless a test makes one
  MkModelOptions o;
  o.config_path = testing::write_config(dir, config, "src_" + out + ".json");
  o.out_dir = dir.file(out);
  o.seed = seed;
  return o;
}

TEST(MkModel, SameSeedSameBytesWhateverTheThreadCount) {
  TempDir dir;
  core::ThreadPool one(1), three(3);
  auto a = options(dir, testing::small_config(), 11, "a");
  a.pool = &one;
  auto b = options(dir, testing::small_config(), 11, "b");
  b.pool = &three;
  auto c = options(dir, testing::small_config(), 12, "c");
  make_model(a);
  make_model(b);
  make_model(c);
  const std::string fa = testing::read_bytes(a.out_dir + "/model.safetensors");
  const std::string fb = testing::read_bytes(b.out_dir + "/model.safetensors");
  const std::string fc = testing::read_bytes(c.out_dir + "/model.safetensors");
  EXPECT_GT(fa.size(), 100000u);
  EXPECT_TRUE(fa == fb) << "same seed, different thread count: files differ";
  EXPECT_EQ(fa.size(), fc.size());
  EXPECT_FALSE(fa == fc) << "different seeds gave identical files";
  // Different seeds differ in every tensor, not only somewhere.
  SafetensorsFile sa(a.out_dir + "/model.safetensors"), sc(c.out_dir + "/model.safetensors");
  for (const auto& t : sa.tensors()) {
    if (t.nbytes < 64) continue;  // a few random values may coincide by chance
    const TensorView& u = sc.get(t.name);
    EXPECT_NE(std::memcmp(t.data, u.data, t.nbytes), 0) << t.name;
  }
  // The config is copied verbatim.
  EXPECT_EQ(testing::read_bytes(a.out_dir + "/config.json"), testing::read_bytes(a.config_path));
}

TEST(MkModel, LayoutMatchesTheInventory) {
  TempDir dir;
  auto o = options(dir, testing::small_config(), 1, "m");
  const MkModelResult r = make_model(o);
  SafetensorsFile f(o.out_dir + "/model.safetensors");
  const auto specs = expected_tensors(ModelConfig::from_json(testing::small_config(), "small"));
  ASSERT_EQ(f.tensors().size(), specs.size());
  EXPECT_EQ(r.tensors, specs.size());
  for (const auto& s : specs) {
    const TensorView* t = f.find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->dtype, s.dtype) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
  }
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/model.safetensors.index.json"));
}

// The same model with bf16 experts and bf16 linears: the generator draws the same float values for
// a tensor name whatever its storage, so the bf16 copy is the unquantized reference of the FP8/FP4
// copy. Decoding the quantized file with the spec's recipe (§4.3, written out here) must land within
// half a quantization step of it: a wrong nibble order or scale grid orientation cannot.
TEST(MkModel, QuantizedWeightsDecodeToTheUnquantizedValues) {
  TempDir dir;
  auto q = options(dir, testing::small_config(), 5, "q");
  auto plain_cfg = testing::small_config();
  plain_cfg.erase("quantization_config");
  plain_cfg["expert_dtype"] = "bf16";
  auto p = options(dir, plain_cfg, 5, "p");
  make_model(q);
  make_model(p);
  SafetensorsFile fq(q.out_dir + "/model.safetensors"), fp(p.out_dir + "/model.safetensors");

  // FP4: I8 [out, in/2], byte c = columns 2c (low nibble), 2c+1 (high); scale [out, in/32].
  for (const char* name : {"layers.0.ffn.experts.2.w1", "mtp.0.ffn.experts.0.w2"}) {
    const TensorView& w = fq.get(std::string(name) + ".weight");
    const TensorView& s = fq.get(std::string(name) + ".scale");
    const TensorView& ref = fp.get(std::string(name) + ".weight");
    const int64_t rows = ref.shape[0], cols = ref.shape[1];
    ASSERT_EQ(w.shape, (std::vector<int64_t>{rows, cols / 2}));
    double max_err_over_step = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t byte = w.data[r * (cols / 2) + c / 2];
        const int nib = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
        static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
        const double scale = std::ldexp(1.0, int(s.data[r * (cols / 32) + c / 32]) - 127);
        const double v = ((nib & 8) ? -1 : 1) * mags[nib & 7] * scale;
        const double x = core::bf16_to_float(ref.as<uint16_t>()[r * cols + c]);
        // Largest FP4 gap is 2 (between 4 and 6): half of it, plus the bf16 rounding of x.
        max_err_over_step = std::max(max_err_over_step, std::fabs(v - x) / (1.0 * scale) - std::fabs(x) / 128 / scale);
      }
    }
    EXPECT_LE(max_err_over_step, 1.0) << name;
  }

  // FP8: F8_E4M3 [out, in], scale [ceil(out/128), ceil(in/128)].
  for (const char* name : {"layers.1.attn.wq_b", "layers.3.attn.wo_a", "mtp.0.e_proj"}) {
    const TensorView& w = fq.get(std::string(name) + ".weight");
    const TensorView& s = fq.get(std::string(name) + ".scale");
    const TensorView& ref = fp.get(std::string(name) + ".weight");
    const int64_t rows = ref.shape[0], cols = ref.shape[1], scols = (cols + 127) / 128;
    ASSERT_EQ(s.shape, (std::vector<int64_t>{(rows + 127) / 128, scols}));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t code = w.data[r * cols + c];
        const int e = (code >> 3) & 0xF, mnt = code & 7;
        const double mag = e == 0 ? std::ldexp(mnt / 8.0, -6) : std::ldexp(1 + mnt / 8.0, e - 7);
        const double scale = std::ldexp(1.0, int(s.data[(r / 128) * scols + c / 128]) - 127);
        const double v = ((code & 0x80) ? -mag : mag) * scale;
        const double x = core::bf16_to_float(ref.as<uint16_t>()[r * cols + c]);
        // E4M3 relative step 2^-3 (normal range), absolute step 2^-9 x scale below 2^-6; plus bf16 error.
        const double tol = std::max(std::fabs(x) / 16, std::ldexp(1.0, -10) * scale) + std::fabs(x) / 256;
        ASSERT_LE(std::fabs(v - x), tol) << name << " [" << r << "," << c << "]";
      }
    }
  }
}

// Scales are the smallest power of two that fits the block: 2^ceil(log2(amax/qmax)), so the largest
// scaled amax of every block lies in (qmax/2, qmax] and its largest code in [qmax/2, qmax] (the floors
// never bind for these weights).
TEST(MkModel, ScaleGridsAreTightPowerOfTwoCeilings) {
  TempDir dir;
  auto o = options(dir, testing::small_config(), 3, "s");
  make_model(o);
  SafetensorsFile f(o.out_dir + "/model.safetensors");
  int checked_fp8 = 0, checked_fp4 = 0;
  for (const auto& t : f.tensors()) {
    if (t.dtype == DType::kF8E4M3) {
      const TensorView& s = f.get(t.name.substr(0, t.name.size() - 7) + ".scale");
      const int64_t rows = t.shape[0], cols = t.shape[1], scols = s.shape[1];
      std::vector<float> block_max(static_cast<size_t>(s.numel()), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          float& m = block_max[(r / 128) * scols + c / 128];
          m = std::max(m, std::fabs(core::fp8_e4m3_to_float(t.data[r * cols + c])));
        }
      }
      for (float m : block_max) {
        EXPECT_GE(m, 224.0f) << t.name;
        EXPECT_LE(m, 448.0f) << t.name;
      }
      ++checked_fp8;
    } else if (t.dtype == DType::kI8) {
      const int64_t rows = t.shape[0], bytes = t.shape[1];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < bytes * 2 / 32; ++b) {
          float m = 0;
          for (int64_t j = 0; j < 16; ++j) {
            const uint8_t v = t.data[r * bytes + b * 16 + j];
            m = std::max({m, std::fabs(core::fp4_e2m1_to_float(v & 0xF)), std::fabs(core::fp4_e2m1_to_float(v >> 4))});
          }
          ASSERT_GE(m, 3.0f) << t.name << " row " << r << " block " << b;
          ASSERT_LE(m, 6.0f) << t.name;
        }
      }
      ++checked_fp4;
    }
  }
  EXPECT_GT(checked_fp8, 20);
  EXPECT_EQ(checked_fp4, 5 * 4 * 3);  // 4 layers + MTP, 4 experts, w1/w2/w3
}

TEST(MkModel, ValueRulesHold) {
  TempDir dir;
  auto o = options(dir, testing::small_config(), 9, "v");
  make_model(o);
  SafetensorsFile f(o.out_dir + "/model.safetensors");
  const auto cfg = ModelConfig::from_json(testing::small_config(), "small");
  // tid2eid: valid, distinct expert ids per token.
  for (int64_t L = 0; L < cfg.num_hash_layers; ++L) {
    const TensorView& t = f.get("layers." + std::to_string(L) + ".ffn.gate.tid2eid");
    const int64_t* ids = t.as<int64_t>();
    std::set<int64_t> used;
    for (int64_t tok = 0; tok < t.shape[0]; ++tok) {
      std::set<int64_t> row;
      for (int64_t k = 0; k < t.shape[1]; ++k) {
        const int64_t e = ids[tok * t.shape[1] + k];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, cfg.n_routed_experts);
        row.insert(e);
        used.insert(e);
      }
      ASSERT_EQ(row.size(), static_cast<size_t>(t.shape[1])) << "token " << tok << " repeats an expert";
    }
    EXPECT_EQ(used.size(), static_cast<size_t>(cfg.n_routed_experts));
  }
  // Every float is finite; norms near 1; sinks and mHC values of sensible size.
  for (const auto& t : f.tensors()) {
    if (t.dtype == DType::kF32) {
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(t.as<float>()[i])) << t.name;
    } else if (t.dtype == DType::kBF16) {
      for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isfinite(core::bf16_to_float(t.as<uint16_t>()[i]))) << t.name;
    } else if (t.dtype == DType::kF8E4M3) {
      for (size_t i = 0; i < t.nbytes; ++i) ASSERT_NE(t.data[i] & 0x7F, 0x7F) << t.name << ": NaN code";
    } else if (t.dtype == DType::kF8E8M0) {
      for (size_t i = 0; i < t.nbytes; ++i) ASSERT_NE(t.data[i], 0xFF) << t.name << ": NaN scale";
    }
    if (t.name.size() > 12 && t.name.substr(t.name.size() - 12) == "_norm.weight") {
      double mean = 0;
      for (int64_t i = 0; i < t.numel(); ++i) mean += core::bf16_to_float(t.as<uint16_t>()[i]);
      mean /= static_cast<double>(t.numel());
      EXPECT_NEAR(mean, 1.0, 0.1) << t.name;
    }
  }
  // Embedding rows: roughly unit variance (the streams start at RMS 1).
  const TensorView& e = f.get("embed.weight");
  double sq = 0;
  for (int64_t i = 0; i < e.numel(); ++i) sq += std::pow(core::bf16_to_float(e.as<uint16_t>()[i]), 2);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(e.numel())), 1.0, 0.05);
}

TEST(MkModel, ShardsAndIndex) {
  TempDir dir;
  auto o = options(dir, testing::small_config(), 2, "sh");
  o.shard_size_bytes = 300 << 10;
  const MkModelResult r = make_model(o);
  ASSERT_GT(r.files.size(), 2u);
  const auto index = nlohmann::json::parse(testing::read_bytes(o.out_dir + "/model.safetensors.index.json"));
  uint64_t total = 0;
  size_t listed = 0;
  for (const auto& path : r.files) {
    SafetensorsFile f(path);
    const std::string base = path.substr(path.rfind('/') + 1);
    uint64_t bytes = 0;
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(index["weight_map"][t.name], base) << t.name;
      bytes += t.nbytes;
      ++listed;
    }
    // A shard exceeds the limit only when it holds a single weight (+ scale) that is larger.
    if (bytes > o.shard_size_bytes) {
      EXPECT_LE(f.tensors().size(), 2u) << base;
    }
    total += bytes;
    // A weight and its scale share a shard.
    for (const auto& t : f.tensors()) {
      if (t.dtype == DType::kF8E8M0) {
        EXPECT_NE(f.find(t.name.substr(0, t.name.size() - 6) + ".weight"), nullptr) << t.name;
      }
    }
  }
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(index["weight_map"].size(), listed);
  EXPECT_EQ(total, r.data_bytes);

  // Sharded and single-file outputs hold the same tensors byte for byte; writing a single file into the
  // same directory removes the old shards and index.
  auto single = o;
  single.shard_size_bytes = 0;
  single.out_dir = dir.file("single");
  make_model(single);
  SafetensorsFile s(single.out_dir + "/model.safetensors");
  auto ck = Checkpoint::open(o.out_dir);
  for (const auto& t : s.tensors()) {
    const TensorView& u = ck->get(t.name);
    ASSERT_EQ(u.nbytes, t.nbytes);
    ASSERT_EQ(std::memcmp(u.data, t.data, t.nbytes), 0) << t.name;
  }
  ck.reset();
  single.out_dir = o.out_dir;
  testing::write_bytes(o.out_dir + "/notes.txt", "keep");
  testing::write_bytes(o.out_dir + "/model-extra.safetensors", "keep");
  make_model(single);
  EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(r.files.front()));
  EXPECT_FALSE(std::filesystem::exists(r.files.back()));
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/notes.txt"));  // only model files are replaced
  EXPECT_TRUE(std::filesystem::exists(o.out_dir + "/model-extra.safetensors"));
  EXPECT_NO_THROW(Checkpoint::open(o.out_dir));
}

TEST(MkModel, Tokenizer) {
  TempDir dir;
  // Explicit directory.
  std::filesystem::create_directories(dir.file("tok"));
  testing::write_bytes(dir.file("tok/tokenizer.json"), "{\"model\": {}}");
  testing::write_bytes(dir.file("tok/tokenizer_config.json"), "{\"add_bos_token\": false}");
  auto o = options(dir, testing::small_config(), 1, "t1");
  o.tokenizer_dir = dir.file("tok");
  EXPECT_EQ(make_model(o).tokenizer_source, dir.file("tok"));
  EXPECT_EQ(testing::read_bytes(o.out_dir + "/tokenizer.json"), "{\"model\": {}}");
  EXPECT_EQ(testing::read_bytes(o.out_dir + "/tokenizer_config.json"), "{\"add_bos_token\": false}");

  // Default location under DSINFER_HOME.
  auto d = options(dir, testing::small_config(), 1, "t2");
  std::filesystem::create_directories(dir.file("home/tokenizers/v4"));
  testing::write_bytes(dir.file("home/tokenizers/v4/tokenizer.json"), "{}");
  ::setenv("DSINFER_HOME", dir.file("home").c_str(), 1);
  EXPECT_EQ(default_tokenizer_dir(), dir.file("home") + "/tokenizers/v4");
  EXPECT_EQ(make_model(d).tokenizer_source, dir.file("home/tokenizers/v4"));
  EXPECT_TRUE(std::filesystem::exists(d.out_dir + "/tokenizer.json"));

  // None anywhere: a warning, no tokenizer files, still a checkpoint.
  auto n = options(dir, testing::small_config(), 1, "t3");
  EXPECT_TRUE(make_model(n).tokenizer_source.empty());
  EXPECT_FALSE(std::filesystem::exists(n.out_dir + "/tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(n.out_dir + "/model.safetensors"));

  // An explicit directory without tokenizer.json is an error, raised before anything is written.
  auto bad = options(dir, testing::small_config(), 1, "t4");
  bad.tokenizer_dir = dir.file("nowhere");
  const std::string msg = error_of([&] { make_model(bad); });
  EXPECT_NE(msg.find(dir.file("nowhere")), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(bad.out_dir + "/model.safetensors"));
}

TEST(MkModel, RejectsAnInvalidConfig) {
  TempDir dir;
  auto cfg = testing::small_config();
  cfg["o_groups"] = 3;
  auto o = options(dir, cfg, 1, "bad");
  const std::string msg = error_of([&] { make_model(o); });
  EXPECT_NE(msg.find("'num_attention_heads'"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(o.out_dir));
}

TEST(MkModel, DSparkCheckpointOpens) {
  TempDir dir;
  auto cfg = testing::small_config();
  cfg["compress_ratios"] = {0, 4, 8, 4, 0, 0};
  cfg["dspark_block_size"] = 5;
  cfg["dspark_noise_token_id"] = 300;
  cfg["dspark_target_layer_ids"] = {1, 2, 3};
  cfg["dspark_markov_rank"] = 16;
  auto o = options(dir, cfg, 1, "ds");
  make_model(o);
  auto ck = Checkpoint::open(o.out_dir);
  EXPECT_EQ(ck->config().n_mtp_layers, 2);
  EXPECT_EQ(ck->linear("mtp.0.main_proj").cols, 384);
  EXPECT_EQ(ck->get("mtp.1.confidence_head.proj.weight").shape, (std::vector<int64_t>{1, 144}));
}

}  // namespace
}  // namespace dsinfer::model
