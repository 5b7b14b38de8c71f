// Synthetic V4 and V4.1 checkpoints.
//
// Random numbers: a counter-based generator. Each tensor gets a key = mix(seed, FNV-1a(name)); element
// i of the tensor (row-major logical index) draws splitmix64(key + i * golden), so any element can be
// computed independently, in any order, on any thread. "Normal" values are Irwin-Hall sums of four
// 16-bit uniforms (mean 0, std 1, bounded at ±3.46): cheap, and the products they feed are sums over
// hundreds of terms, which are Gaussian anyway.
//
// Magnitudes (why the forward pass stays in range through every layer; d = hidden_size, "in" = a
// weight's input features). Every sub-layer input is RMS-normalised, so the choices below fix the size
// of what each sub-layer adds to the mHC streams relative to the embedding (RMS 1):
//  * embed.weight N(0, 1): the streams start at RMS 1.
//  * RMSNorm weights 1 + 0.1 N: near identity, not exactly 1 (a wrong norm weight must show).
//  * attention linears (wq_a, wq_b, wkv, wo_a, wo_b, indexer wq_b / weights_proj, compressor wkv/wgate,
//    e_proj/h_proj/main_proj) std 1/sqrt(in): unit-variance outputs. q and kv are RMS-normalised, so
//    scores q.k/sqrt(hd) are ~N(0, 1): softmaxes neither uniform nor one-hot. The attention output is
//    an average of kv vectors, RMS 0.3-1.
//  * attn_sink 0.5 + 0.5 N: comparable to one score, so the sink takes a visible share of the
//    denominator for short contexts and a small one for long ones.
//  * compressor ape 0.5 N: shifts the per-channel pooling softmax without dominating wgate's scores.
//  * router gate.weight std 1/sqrt(d) (logits ~N(0, 1), sqrt-softplus scores 0.5..1.4), gate.bias
//    0.1 N: the bias reorders close candidates only, so selection still follows the token.
//  * experts and shared experts: w1/w3 std 3/sqrt(d): gate/up pre-activations ~N(0, 9), so the SwiGLU
//    clamp at 10 is hit rarely (|u| > 10 is ~0.1 % of elements: a few times per token) but does act;
//    w2 std 0.1/sqrt(I): silu(g)*u has RMS ~6, so each expert output is ~0.6 and the MoE output
//    (1.5 x the weighted routed sum + shared) has RMS ~1, like the attention output.
//  * mHC: hc_*_fn std 1/sqrt(hc*d) (the mixes m are ~N(0, 1) since the stream is RMS-normalised),
//    hc_*_scale U(0.5, 1.5), hc_*_base 0.5 N for pre/post and 2*I + 0.5 N for comb: pre ~0.5,
//    post ~1, and after Sinkhorn comb keeps ~0.7 on the diagonal, so streams mix but stay distinct and
//    their RMS grows only like sqrt(layers) (doubly stochastic comb never amplifies).
//  * head.weight std 3/sqrt(d) on an RMS-normalised input: logits ~N(0, 9), a std of 3. Over a 129 k
//    vocabulary the top token has ~5 % probability and the top-2 gap is ~0.6: sampling stays diverse
//    and greedy argmax is not decided by rounding noise.
//  * tid2eid: for every token num_experts_per_tok distinct experts (partial Fisher-Yates).
//  * DSpark: markov_w1 N(0, 1), markov_w2 std 1/sqrt(rank) (Markov bias ~N(0, 1), below the logit
//    spread), confidence_head.proj std 1/sqrt(in). V4.1's markov_head.embed / .head likewise.
//  * V4.1 Engram: table rows N(0, 1) (so engram.wkv, std 1/sqrt(in), gives unit-variance keys and
//    value), q_weight / k_weight 1 + 0.1 N (their product weights the gate's dot product near 1: the
//    gate sqrt-signed logit is ~N(0, 1)-sized and the gates spread over (0, 1)); gate.bias_vl as gate.bias.
//  * V4.1 engram_token_map.json (model-v41.md §5 sidecar): token t < C maps to t, every later token to
//    a random earlier id (C = engram_compressed_vocab_size), so the map has exactly C ids in order of
//    first appearance and many collisions, as the real one; token 2 (pad) maps to 2.
// Quantization follows the reference's weight format: FP8 per BxB block (B = 128 in V4, 32 in V4.1) with scale
// 2^ceil(log2(amax/448)) (amax floored at 1e-4), FP4 per 1x32 block with 2^ceil(log2(amax/6))
// (floor 6*2^-126), values rounded to nearest even (core/dtypes.h); the V4.1 Engram table per row and 32
// columns like FP8 weights. The dequantized values ARE the model.
#include "model/mkmodel.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtypes.h"
#include "core/error.h"
#include "core/log.h"
#include "model/registry.h"
#include "model/safetensors.h"

namespace dsinfer::model {
namespace {

namespace fs = std::filesystem;
using core::DType;

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

inline uint64_t splitmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  return h;
}

struct Rng {
  uint64_t key;
  Rng(uint64_t seed, const std::string& name) : key(splitmix64(splitmix64(seed + kGolden) ^ fnv1a(name))) {}
  uint64_t bits(uint64_t i) const { return splitmix64(key + (i + 1) * kGolden); }
  float normal(uint64_t i) const {
    const uint64_t u = bits(i);
    const int64_t s = static_cast<int64_t>(u & 0xFFFF) + static_cast<int64_t>((u >> 16) & 0xFFFF) +
                      static_cast<int64_t>((u >> 32) & 0xFFFF) + static_cast<int64_t>(u >> 48);
    return static_cast<float>(static_cast<double>(s - 131070) * (1.0 / 37837.22));  // (s - 4*32767.5)/(65536/sqrt 3)
  }
  float uniform(uint64_t i) const { return static_cast<float>(bits(i) >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  uint64_t below(uint64_t i, uint64_t n) const { return ((bits(i) >> 32) * n) >> 32; }
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Standard deviation of the float weights of a linear, before quantization (see the file comment).
float linear_std(const ModelConfig& c, const TensorSpec& spec) {
  const float in = static_cast<float>(spec.cols);
  const std::string& n = spec.linear;
  if (n == "head") return 3.0f / std::sqrt(static_cast<float>(c.hidden_size));
  if (contains(n, "experts.")) {  // routed and shared experts
    if (ends_with(n, ".w2")) return 0.1f / std::sqrt(in);
    return 3.0f / std::sqrt(in);
  }
  return 1.0f / std::sqrt(in);
}

// The float value of element i of a non-linear tensor.
float plain_value(const TensorSpec& spec, const Rng& rng, int64_t i, int64_t hc) {
  switch (spec.kind) {
    case TensorKind::kEmbedding: return rng.normal(i);
    case TensorKind::kNorm: return 1.0f + 0.1f * rng.normal(i);
    case TensorKind::kHcFn: return rng.normal(i) / std::sqrt(static_cast<float>(spec.shape[1]));
    case TensorKind::kHcScale: return 0.5f + rng.uniform(i);
    case TensorKind::kHcBase: {
      const float noise = 0.5f * rng.normal(i);
      if (ends_with(spec.name, "hc_head_base") || i < 2 * hc) return noise;
      const int64_t j = (i - 2 * hc) / hc, k = (i - 2 * hc) % hc;
      return (j == k ? 2.0f : 0.0f) + noise;
    }
    case TensorKind::kAttnSink: return 0.5f + 0.5f * rng.normal(i);
    case TensorKind::kApe: return 0.5f * rng.normal(i);
    case TensorKind::kGateBias: return 0.1f * rng.normal(i);
    case TensorKind::kEngramGate: return 1.0f + 0.1f * rng.normal(i);
    default: core::fail("mkmodel: no plain value rule for tensor '", spec.name, "'");
  }
}

// FP8 with one E8M0 scale per block of br rows x bc columns (weights: B x B; the Engram table: 1 x 32).
void fill_fp8(const Rng& rng, float std, int64_t rows, int64_t cols, int64_t br, int64_t bc, uint8_t* w,
              uint8_t* scale, core::ThreadPool& pool) {
  DSINFER_CHECK_INTERNAL(br >= 1 && bc >= 1 && br * bc <= 128 * 128, "mkmodel: FP8 block ", br, "x", bc);
  const int64_t nrb = (rows + br - 1) / br, ncb = (cols + bc - 1) / bc;
  pool.parallel_for(nrb * ncb, std::max<int64_t>(1, 4096 / (br * bc)), [&](int64_t tb, int64_t te) {
    std::vector<float> block(static_cast<size_t>(br * bc));
    for (int64_t task = tb; task < te; ++task) {
      const int64_t rb = task / ncb, cb = task % ncb;
      const int64_t r0 = rb * br, r1 = std::min(rows, r0 + br), c0 = cb * bc, c1 = std::min(cols, c0 + bc);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          const float v = std * rng.normal(static_cast<uint64_t>(r * cols + c));
          block[static_cast<size_t>((r - r0) * bc + (c - c0))] = v;
          amax = std::max(amax, std::fabs(v));
        }
      }
      const uint8_t code = core::e8m0_scale_code(amax, core::kFp8Max, core::kFp8AmaxFloor);
      const float inv = 1.0f / core::e8m0_to_float(code);  // a power of two: exact
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) {
          w[r * cols + c] = core::float_to_fp8_e4m3(block[static_cast<size_t>((r - r0) * bc + (c - c0))] * inv);
        }
      }
      scale[rb * ncb + cb] = code;
    }
  });
}

void fill_fp4(const Rng& rng, float std, int64_t rows, int64_t cols, uint8_t* w, uint8_t* scale,
              core::ThreadPool& pool) {
  const int64_t nb = cols / 32;
  pool.parallel_for(rows, 8, [&](int64_t rb, int64_t re) {
    float block[32];
    for (int64_t r = rb; r < re; ++r) {
      for (int64_t b = 0; b < nb; ++b) {
        float amax = 0.0f;
        for (int64_t j = 0; j < 32; ++j) {
          block[j] = std * rng.normal(static_cast<uint64_t>(r * cols + b * 32 + j));
          amax = std::max(amax, std::fabs(block[j]));
        }
        const uint8_t code = core::e8m0_scale_code(amax, core::kFp4Max, core::kFp4AmaxFloor);
        const float inv = 1.0f / core::e8m0_to_float(code);
        uint8_t* out = w + r * (cols / 2) + b * 16;
        for (int64_t j = 0; j < 16; ++j) {
          const uint8_t lo = core::float_to_fp4_e2m1(block[2 * j] * inv);
          const uint8_t hi = core::float_to_fp4_e2m1(block[2 * j + 1] * inv);
          out[j] = static_cast<uint8_t>(lo | (hi << 4));  // low nibble = even logical column
        }
        scale[r * nb + b] = code;
      }
    }
  });
}

template <typename F>
void fill_elements(int64_t n, core::ThreadPool& pool, F&& f) {
  pool.parallel_for(n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) f(i);
  });
}

void fill_tid2eid(const Rng& rng, int64_t vocab, int64_t k, int64_t n_experts, int64_t* out, core::ThreadPool& pool) {
  pool.parallel_for(vocab, 1024, [&](int64_t tb, int64_t te) {
    std::vector<int64_t> perm(static_cast<size_t>(n_experts));
    for (int64_t t = tb; t < te; ++t) {
      for (int64_t e = 0; e < n_experts; ++e) perm[e] = e;
      for (int64_t j = 0; j < k; ++j) {
        const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(t * n_experts + j),
                                                                static_cast<uint64_t>(n_experts - j)));
        std::swap(perm[j], perm[pick]);
        out[t * k + j] = perm[j];
      }
    }
  });
}

// model.safetensors, model.safetensors.index.json or model-NNNNN-of-NNNNN.safetensors.
bool is_model_file(const std::string& name) {
  if (name == "model.safetensors" || name == "model.safetensors.index.json") return true;
  if (name.size() != 32 || name.compare(0, 6, "model-") != 0 || name.compare(11, 4, "-of-") != 0 ||
      name.compare(20, 12, ".safetensors") != 0) {
    return false;
  }
  for (size_t i : {6, 7, 8, 9, 10, 15, 16, 17, 18, 19}) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DSINFER_CHECK(in.good(), "mkmodel: cannot read ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  DSINFER_CHECK(out.good(), "mkmodel: cannot create ", path);
  out << text;
  out.close();
  DSINFER_CHECK(out.good(), "mkmodel: writing ", path, " failed");
}

}  // namespace

void synthesize_tensor(const ModelConfig& config, const TensorSpec& spec, uint64_t seed, core::ThreadPool& pool,
                       std::vector<uint8_t>& bytes, std::vector<uint8_t>* scale_bytes) {
  const Rng rng(seed, spec.name);
  const int64_t numel = shape_numel(spec.shape);
  bytes.assign(static_cast<size_t>(numel) * dtype_size(spec.dtype), 0);
  switch (spec.kind) {
    case TensorKind::kLinearScale:
      core::fail("mkmodel: scale '", spec.name, "' is produced together with its weight");
    case TensorKind::kLinearWeight: {
      const float std = linear_std(config, spec);
      if (spec.storage == WeightStorage::kBF16) {
        auto* out = reinterpret_cast<uint16_t*>(bytes.data());
        fill_elements(numel, pool, [&](int64_t i) { out[i] = core::float_to_bf16(std * rng.normal(i)); });
        return;
      }
      DSINFER_CHECK(scale_bytes != nullptr, "mkmodel: quantized weight '", spec.name, "' needs a scale buffer");
      if (spec.storage == WeightStorage::kFP8) {
        const int64_t b = config.weight_block;
        scale_bytes->assign(static_cast<size_t>(((spec.rows + b - 1) / b) * ((spec.cols + b - 1) / b)), 0);
        fill_fp8(rng, std, spec.rows, spec.cols, b, b, bytes.data(), scale_bytes->data(), pool);
      } else {
        scale_bytes->assign(static_cast<size_t>(spec.rows * (spec.cols / 32)), 0);
        fill_fp4(rng, std, spec.rows, spec.cols, bytes.data(), scale_bytes->data(), pool);
      }
      return;
    }
    case TensorKind::kEngramScale:
      core::fail("mkmodel: scale '", spec.name, "' is produced together with its table");
    case TensorKind::kEngramTable: {
      DSINFER_CHECK(scale_bytes != nullptr, "mkmodel: Engram table '", spec.name, "' needs a scale buffer");
      const int64_t rows = spec.shape[0], cols = spec.shape[1];
      scale_bytes->assign(static_cast<size_t>(rows * (cols / 32)), 0);
      fill_fp8(rng, 1.0f, rows, cols, 1, 32, bytes.data(), scale_bytes->data(), pool);
      return;
    }
    case TensorKind::kTid2Eid:
      fill_tid2eid(rng, spec.shape[0], spec.shape[1], config.n_routed_experts,
                   reinterpret_cast<int64_t*>(bytes.data()), pool);
      return;
    default:
      break;
  }
  if (spec.dtype == DType::kBF16) {
    auto* out = reinterpret_cast<uint16_t*>(bytes.data());
    fill_elements(numel, pool, [&](int64_t i) { out[i] = core::float_to_bf16(plain_value(spec, rng, i, config.hc_mult)); });
  } else if (spec.dtype == DType::kF32) {
    auto* out = reinterpret_cast<float*>(bytes.data());
    fill_elements(numel, pool, [&](int64_t i) { out[i] = plain_value(spec, rng, i, config.hc_mult); });
  } else {
    core::fail("mkmodel: no rule for tensor '", spec.name, "' of dtype ", dtype_name(spec.dtype));
  }
}

std::string default_tokenizer_dir(Architecture arch) {
  const char* home = std::getenv("DSINFER_HOME");
  std::string base;
  if (home && *home) {
    base = home;
  } else {
    const char* h = std::getenv("HOME");
    base = std::string(h ? h : "") + "/.cache/dsinfer";
  }
  return base + "/tokenizers/" + std::string(architecture_info(arch).tokenizer_version);
}

std::string synthetic_engram_token_map(const ModelConfig& config, uint64_t seed) {
  DSINFER_CHECK(config.engram.has_value(), "mkmodel: the config has no Engram layers: no token map");
  const int64_t c = config.engram->compressed_vocab_size;
  const Rng rng(seed, "engram_token_map");
  nlohmann::json map = nlohmann::json::array();
  for (int64_t t = 0; t < config.vocab_size; ++t) {
    map.push_back(t < c ? t : static_cast<int64_t>(rng.below(static_cast<uint64_t>(t), static_cast<uint64_t>(c))));
  }
  return nlohmann::json{{"compressed_vocab_size", c}, {"token_map", std::move(map)}}.dump() + "\n";
}

MkModelResult make_model(const MkModelOptions& options) {
  DSINFER_CHECK(!options.config_path.empty(), "mkmodel: no config given");
  DSINFER_CHECK(!options.out_dir.empty(), "mkmodel: no output directory given");
  const std::string config_text = read_file(options.config_path);
  const ModelConfig config = ModelConfig::parse(config_text, options.config_path);
  core::ThreadPool& pool = options.pool ? *options.pool : core::ThreadPool::global();
  const std::vector<TensorSpec> specs = expected_tensors(config);
  const std::string tok_dir = options.tokenizer_dir ? *options.tokenizer_dir : default_tokenizer_dir(config.arch);
  DSINFER_CHECK(!options.tokenizer_dir || fs::is_regular_file(tok_dir + "/tokenizer.json"), "mkmodel: --tokenizer-dir ",
                tok_dir, " has no tokenizer.json");

  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  DSINFER_CHECK(!ec && fs::is_directory(options.out_dir), "mkmodel: cannot create directory ", options.out_dir, ": ",
                ec.message());
  // Stale files of an earlier run would be picked up by the loader (the index wins over model.safetensors).
  for (const auto& entry : fs::directory_iterator(options.out_dir)) {
    if (entry.is_regular_file() && is_model_file(entry.path().filename().string())) fs::remove(entry.path());
  }
  write_file(options.out_dir + "/config.json", config_text);
  const std::string token_map_path = options.out_dir + "/engram_token_map.json";
  if (config.engram) {
    write_file(token_map_path, synthetic_engram_token_map(config, options.seed));
  } else if (fs::exists(token_map_path)) {
    fs::remove(token_map_path);  // a stale sidecar would take precedence over the tokenizer
  }

  // Units: a weight with its scale stay together in one shard.
  struct Unit {
    size_t weight;
    int64_t scale = -1;
    uint64_t bytes = 0;
  };
  std::vector<Unit> units;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t b = static_cast<uint64_t>(shape_numel(specs[i].shape)) * dtype_size(specs[i].dtype);
    if (specs[i].kind == TensorKind::kLinearScale || specs[i].kind == TensorKind::kEngramScale) {
      DSINFER_CHECK(!units.empty() && specs[units.back().weight].linear == specs[i].linear,
                    "mkmodel: scale '", specs[i].name, "' does not follow its weight");
      units.back().scale = static_cast<int64_t>(i);
      units.back().bytes += b;
    } else {
      units.push_back({i, -1, b});
    }
  }
  std::vector<std::vector<size_t>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    if (options.shard_size_bytes > 0 && !shards.back().empty() && shard_bytes + units[u].bytes > options.shard_size_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(u);
    shard_bytes += units[u].bytes;
    total += units[u].bytes;
  }

  MkModelResult result;
  result.data_bytes = total;
  nlohmann::json weight_map = nlohmann::json::object();
  uint64_t done = 0;
  if (options.progress) options.progress(0, total);
  std::vector<uint8_t> bytes, scale_bytes;
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    if (shards.size() == 1) std::snprintf(name, sizeof(name), "model.safetensors");
    else std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    std::vector<SafetensorsWriter::Entry> entries;
    std::vector<int64_t> entry_of_spec(specs.size(), -1);
    for (size_t u : shards[s]) {
      for (int64_t i : {static_cast<int64_t>(units[u].weight), units[u].scale}) {
        if (i < 0) continue;
        entry_of_spec[i] = static_cast<int64_t>(entries.size());
        entries.push_back({specs[i].name, specs[i].dtype, specs[i].shape});
        weight_map[specs[i].name] = name;
      }
    }
    const std::string path = options.out_dir + "/" + name;
    SafetensorsWriter writer(path, std::move(entries), {{"format", "pt"}});
    for (size_t u : shards[s]) {
      const TensorSpec& w = specs[units[u].weight];
      synthesize_tensor(config, w, options.seed, pool, bytes, units[u].scale >= 0 ? &scale_bytes : nullptr);
      writer.write(static_cast<size_t>(entry_of_spec[units[u].weight]), bytes.data(), bytes.size());
      if (units[u].scale >= 0) {
        writer.write(static_cast<size_t>(entry_of_spec[units[u].scale]), scale_bytes.data(), scale_bytes.size());
      }
      done += units[u].bytes;
      if (options.progress) options.progress(done, total);
    }
    writer.finish();
    result.files.push_back(path);
  }
  result.tensors = specs.size();
  if (shards.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file(options.out_dir + "/model.safetensors.index.json", index.dump(2) + "\n");
  }

  // Tokenizer: explicit directory, else the default cache; missing files are a warning, not an error
  // (tests with small vocabularies have no tokenizer).
  if (fs::is_regular_file(tok_dir + "/tokenizer.json")) {
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
      const std::string src = tok_dir + "/" + f;
      if (!fs::is_regular_file(src)) {
        DSINFER_LOG_WARN("mkmodel: ", src, " not found; copying tokenizer.json only");
        continue;
      }
      fs::copy_file(src, options.out_dir + "/" + f, fs::copy_options::overwrite_existing, ec);
      DSINFER_CHECK(!ec, "mkmodel: cannot copy ", src, ": ", ec.message());
    }
    result.tokenizer_source = tok_dir;
  } else {
    DSINFER_LOG_WARN("mkmodel: no tokenizer at ", tok_dir, "/tokenizer.json; the checkpoint has no tokenizer ",
                     "(pass --tokenizer-dir DIR)");
  }
  return result;
}

}  // namespace dsinfer::model
