#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/layer_schedule.h"
#include "model/registry.h"

namespace dsinfer::model {
namespace {

using nlohmann::json;

// Upper bounds of this engine, with V4-Flash's value (model-v4.md §1.1) for scale. They are far above
// every real V4 config, and low enough that whatever is sized from them (the tensor inventory, the
// per-sequence rings, the per-request top-k buffers, the mHC loop) stays small and fast for a config
// that is hostile or mistaken: such a config is refused here, naming the field, instead of failing
// later with std::bad_alloc, a 500 on every request or a hang.
struct Limit {
  const char* field;
  int64_t max;
  int64_t v4_flash;
};
constexpr Limit kVocabSize{"vocab_size", int64_t{1} << 21, 129280};
constexpr Limit kHiddenSize{"hidden_size", 65536, 4096};
constexpr Limit kLayers{"num_hidden_layers", 512, 43};
constexpr Limit kMtpLayers{"n_mtp_layers", 16, 1};  // 3 in V4-Flash-0731 (DSpark)
constexpr Limit kHeads{"num_attention_heads", 1024, 64};
constexpr Limit kHeadDim{"head_dim", 4096, 512};
constexpr Limit kQLoraRank{"q_lora_rank", 65536, 1024};
constexpr Limit kOLoraRank{"o_lora_rank", 65536, 1024};
constexpr Limit kSlidingWindow{"sliding_window", 8192, 128};  // the window rings of every sequence scale with it
constexpr Limit kCompressRatio{"compress_ratios", 4096, 128};
constexpr Limit kBlockTokens{"compress_ratios", 4096, 128};  // lcm(128, ratios): the compressed block size
constexpr Limit kMaxPositions{"max_position_embeddings", int64_t{1} << 26, 1048576};
constexpr Limit kIndexHeads{"index_n_heads", 1024, 64};
constexpr Limit kIndexHeadDim{"index_head_dim", 4096, 128};
constexpr Limit kIndexTopk{"index_topk", 8192, 512};  // a buffer of index_topk ids per query row and layer
constexpr Limit kMoeInter{"moe_intermediate_size", 65536, 2048};
constexpr Limit kRoutedExperts{"n_routed_experts", 4096, 256};  // the inventory lists every expert's tensors
constexpr Limit kSharedExperts{"n_shared_experts", 64, 1};
constexpr Limit kHcMult{"hc_mult", 16, 4};
constexpr Limit kSinkhornIters{"hc_sinkhorn_iters", 1000, 20};  // run per token and layer
constexpr Limit kDsparkBlock{"dspark_block_size", 64, 5};
constexpr Limit kMarkovRank{"dspark_markov_rank", 65536, 256};
constexpr Limit kCandidateBlocks{"candidate_topk_blocks", int64_t{1} << 20, 2048};  // V4.1 values
constexpr Limit kCandidateBlockSize{"candidate_block_size", 4096, 8};
constexpr Limit kEngramLayers{"engram_layer_ids", 16, 2};
constexpr Limit kEngramNgram{"engram_max_ngram_size", 8, 4};
constexpr Limit kEngramHeads{"engram_n_heads", 64, 8};
constexpr Limit kEngramHeadDim{"engram_head_dim", 4096, 256};
// The prime search starts here and runs by trial division (model/engram_constants.cpp).
constexpr Limit kEngramVocab{"engram_vocab_size", int64_t{1} << 31, 16000000};
constexpr int64_t kMaxExpertInstances = int64_t{1} << 16;
// Lists (compress_ratios, dspark_target_layer_ids) cannot be longer than the layers allow.
constexpr size_t kMaxListEntries = kLayers.max + kMtpLayers.max;
// config.json of V4-Flash is ~3 KB.
constexpr size_t kMaxConfigBytes = 1 << 20;

// Reads fields under their HF name or the reference alias (§1.2); both present must agree.
class FieldReader {
 public:
  FieldReader(const json& j, const std::string& source) : j_(j), source_(source) {}

  const json* find(const std::string& hf, const std::string& ref) const {
    const json* a = j_.contains(hf) ? &j_.at(hf) : nullptr;
    const json* b = (!ref.empty() && j_.contains(ref)) ? &j_.at(ref) : nullptr;
    if (a && b && *a != *b) {
      core::fail("config ", source_, ": field '", hf, "' (", a->dump(), ") and its reference alias '", ref, "' (",
                 b->dump(), ") disagree");
    }
    return a ? a : b;
  }

  std::string label(const std::string& hf, const std::string& ref) const {
    return ref.empty() ? "'" + hf + "'" : "'" + hf + "' (reference: '" + ref + "')";
  }

  int64_t integer(const std::string& hf, const std::string& ref = "", std::optional<int64_t> def = std::nullopt) const {
    const json* v = find(hf, ref);
    if (!v) {
      DSINFER_CHECK(def.has_value(), "config ", source_, ": missing required field ", label(hf, ref));
      return *def;
    }
    DSINFER_CHECK(v->is_number_integer(), "config ", source_, ": field ", label(hf, ref),
                  " must be an integer, got ", v->dump());
    DSINFER_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= uint64_t{INT64_MAX}, "config ", source_,
                  ": field ", label(hf, ref), " is out of range: ", v->dump());
    return v->get<int64_t>();
  }

  double number(const std::string& hf, const std::string& ref = "", std::optional<double> def = std::nullopt) const {
    const json* v = find(hf, ref);
    if (!v) {
      DSINFER_CHECK(def.has_value(), "config ", source_, ": missing required field ", label(hf, ref));
      return *def;
    }
    DSINFER_CHECK(v->is_number(), "config ", source_, ": field ", label(hf, ref), " must be a number, got ",
                  v->dump());
    return v->get<double>();
  }

  std::string string(const std::string& hf, const std::string& ref = "",
                     std::optional<std::string> def = std::nullopt) const {
    const json* v = find(hf, ref);
    if (!v) {
      DSINFER_CHECK(def.has_value(), "config ", source_, ": missing required field ", label(hf, ref));
      return *def;
    }
    DSINFER_CHECK(v->is_string(), "config ", source_, ": field ", label(hf, ref), " must be a string, got ",
                  v->dump());
    return v->get<std::string>();
  }

  bool boolean(const std::string& hf, bool def) const {
    const json* v = find(hf, "");
    if (!v) return def;
    DSINFER_CHECK(v->is_boolean(), "config ", source_, ": field '", hf, "' must be true or false, got ", v->dump());
    return v->get<bool>();
  }

  std::vector<int64_t> integers(const std::string& hf, const std::string& ref = "") const {
    const json* v = find(hf, ref);
    DSINFER_CHECK(v != nullptr, "config ", source_, ": missing required field ", label(hf, ref));
    DSINFER_CHECK(v->is_array(), "config ", source_, ": field ", label(hf, ref), " must be a list of integers, got ",
                  v->dump());
    DSINFER_CHECK(v->size() <= kMaxListEntries, "config ", source_, ": field ", label(hf, ref), " has ", v->size(),
                  " entries, more than the ", kMaxListEntries, " any V4 config can need");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v->size(); ++i) {
      DSINFER_CHECK((*v)[i].is_number_integer() &&
                        (!(*v)[i].is_number_unsigned() || (*v)[i].get<uint64_t>() <= uint64_t{INT64_MAX}),
                    "config ", source_, ": field ", label(hf, ref), "[", i, "] must be an integer, got ",
                    (*v)[i].dump());
      out.push_back((*v)[i].get<int64_t>());
    }
    return out;
  }

  bool has(const std::string& key) const { return j_.contains(key); }

 private:
  const json& j_;
  const std::string& source_;
};

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

const char* weight_storage_name(WeightStorage s) {
  switch (s) {
    case WeightStorage::kBF16: return "bf16";
    case WeightStorage::kFP8: return "fp8 (e4m3, block e8m0 scales)";
    case WeightStorage::kFP4: return "fp4 (e2m1 packed, 1x32 e8m0 scales)";
  }
  return "?";
}

int64_t ModelConfig::compress_ratio(int64_t layer) const {
  DSINFER_CHECK(layer >= 0 && layer < static_cast<int64_t>(compress_ratios.size()), "layer ", layer,
                " out of range: the config has ", compress_ratios.size(), " layers incl. MTP stages");
  return compress_ratios[static_cast<size_t>(layer)];
}

const LayerRoles& ModelConfig::layer_roles(int64_t layer) const {
  DSINFER_CHECK(layer >= 0 && layer < static_cast<int64_t>(roles.size()), "layer ", layer,
                " out of range: the config has roles for ", roles.size(), " layers incl. MTP stages");
  return roles[static_cast<size_t>(layer)];
}

int64_t ModelConfig::routed_experts_of(int64_t layer) const {
  if (is_mtp_stage(layer) && dspark && dspark->n_routed_experts > 0) return dspark->n_routed_experts;
  return n_routed_experts;
}

int64_t ModelConfig::experts_per_tok_of(int64_t layer) const {
  if (is_mtp_stage(layer) && dspark && dspark->num_experts_per_tok > 0) return dspark->num_experts_per_tok;
  return num_experts_per_tok;
}

std::string ModelConfig::layer_prefix(int64_t layer) const {
  if (layer < num_hidden_layers) return core::str_cat("layers.", layer, ".");
  return core::str_cat("mtp.", layer - num_hidden_layers, ".");
}

namespace {

// V4.1's HF config nests the text model under text_config (model-v41.md §1.1) with quantization_config
// and the token ids at the top level: the text fields are read as if they stood at the top level. A
// field in both places must agree. vision_config is not read (a text-only engine).
json flatten_text_config(const json& top, const std::string& source) {
  const json& text = top.at("text_config");
  DSINFER_CHECK(text.is_object(), "config ", source, ": field 'text_config' must be an object, got ", text.dump());
  json flat = text;
  flat.erase("model_type");  // deepseek_v41_text: checked against the registry below
  for (auto it = top.begin(); it != top.end(); ++it) {
    if (it.key() == "text_config" || it.key() == "vision_config") continue;
    if (flat.contains(it.key())) {
      DSINFER_CHECK(flat.at(it.key()) == it.value(), "config ", source, ": field '", it.key(), "' is ",
                    it.value().dump(), " at the top level but ", flat.at(it.key()).dump(), " in text_config");
    } else {
      flat[it.key()] = it.value();
    }
  }
  return flat;
}

}  // namespace

int64_t EngramConfig::index_of(int64_t layer) const {
  for (size_t k = 0; k < layer_ids.size(); ++k) {
    if (layer_ids[k] == layer) return static_cast<int64_t>(k);
  }
  return -1;
}

ModelConfig ModelConfig::from_json(const json& top, const std::string& source) {
  DSINFER_CHECK(top.is_object(), "config ", source, ": top level is not a JSON object");
  ModelConfig c;
  const bool nested = top.contains("text_config");
  const json flat = nested ? flatten_text_config(top, source) : json();
  const json& j = nested ? flat : top;
  FieldReader r(j, source);

  const bool reference_style = r.has("dim") && !r.has("hidden_size");
  // The reference's inference/config.json has no architectures: V4.1's has the kv-source list (§1.2).
  const bool reference_v41 = reference_style && (r.has("kv_source_layers") || r.has("kv_source_layer_ids"));
  if (r.has("architectures")) {
    const json& a = j.at("architectures");
    DSINFER_CHECK(a.is_array() && !a.empty() && a[0].is_string(), "config ", source,
                  ": field 'architectures' must be a non-empty list of strings, got ", a.dump());
    c.architecture = a[0].get<std::string>();
  } else if (reference_style) {
    c.architecture = reference_v41 ? "DeepseekV41ForCausalLM" : "DeepseekV4ForCausalLM";
  }
  const std::optional<std::string> default_type =
      reference_style ? std::optional<std::string>(reference_v41 ? "deepseek_v41" : "deepseek_v4") : std::nullopt;
  c.model_type = r.string("model_type", "", default_type);
  if (c.architecture.empty()) {
    for (const auto& a : architectures()) {
      if (a.model_type == c.model_type) c.architecture = std::string(a.name);
    }
  }
  const ArchitectureInfo* info = find_architecture(c.architecture);
  DSINFER_CHECK(info != nullptr, "config ", source, ": field 'architectures' names '", c.architecture,
                "', which this engine does not know (known: ", known_architecture_names(), ")");
  c.arch = info->id;
  DSINFER_CHECK(c.model_type == info->model_type, "config ", source, ": field 'model_type' must be '",
                info->model_type, "' for ", info->name, ", got '", c.model_type, "'");
  if (!info->text_model_type.empty() && nested) {
    const json& tm = top.at("text_config");
    DSINFER_CHECK(!tm.contains("model_type") || tm.at("model_type") == info->text_model_type, "config ", source,
                  ": field 'text_config.model_type' must be '", info->text_model_type, "', got ",
                  tm.contains("model_type") ? tm.at("model_type").dump() : "");
  }
  const bool v41 = c.arch == Architecture::kDeepseekV41;
  c.weight_block = info->weight_block;
  c.activation_block = info->activation_block;
  c.deferred_mix = v41;
  c.q_head_norm = !v41;

  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size", "dim");
  c.num_hidden_layers = r.integer("num_hidden_layers", "n_layers");
  c.num_attention_heads = r.integer("num_attention_heads", "n_heads");
  c.num_key_value_heads = r.integer("num_key_value_heads", "", 1);
  c.head_dim = r.integer("head_dim");
  c.qk_rope_head_dim = r.integer("qk_rope_head_dim", "rope_head_dim");
  c.q_lora_rank = r.integer("q_lora_rank");
  c.o_groups = r.integer("o_groups");
  c.o_lora_rank = r.integer("o_lora_rank");
  c.sliding_window = r.integer("sliding_window", "window_size");
  c.compress_ratios = r.integers("compress_ratios");
  c.compress_rope_theta = r.number("compress_rope_theta");
  c.rope_theta = r.number("rope_theta");

  if (r.has("rope_scaling") && !j.at("rope_scaling").is_null()) {
    const json& rs = j.at("rope_scaling");
    DSINFER_CHECK(rs.is_object(), "config ", source, ": field 'rope_scaling' must be an object, got ", rs.dump());
    FieldReader s(rs, source);
    YarnScaling y;
    y.type = s.string("type", "rope_type");
    y.factor = s.number("factor");
    y.original_max_position_embeddings = s.integer("original_max_position_embeddings");
    y.beta_fast = s.number("beta_fast", "", 32.0);
    y.beta_slow = s.number("beta_slow", "", 1.0);
    c.rope_scaling = y;
  } else if (r.has("rope_factor") || r.has("original_seq_len")) {
    YarnScaling y;
    y.factor = r.number("rope_factor", "", 1.0);
    y.original_max_position_embeddings = r.integer("original_seq_len", "", 0);
    y.beta_fast = r.number("beta_fast", "", 32.0);
    y.beta_slow = r.number("beta_slow", "", 1.0);
    c.rope_scaling = y;
  }
  // The reference's runtime max_seq_len is not a model property; fall back to the YaRN original length.
  std::optional<int64_t> derived_max_positions;
  if (reference_style && c.rope_scaling) {
    // In double and clamped: a hostile factor must not overflow the conversion (validate() then refuses it).
    const double n = static_cast<double>(c.rope_scaling->original_max_position_embeddings) *
                     std::floor(c.rope_scaling->factor);
    derived_max_positions = n >= 0 && n < 9e18 ? static_cast<int64_t>(n) : INT64_MAX;
  }
  c.max_position_embeddings = r.integer("max_position_embeddings", "", derived_max_positions);

  c.index_n_heads = r.integer("index_n_heads");
  c.index_head_dim = r.integer("index_head_dim");
  c.index_topk = r.integer("index_topk");

  c.moe_intermediate_size = r.integer("moe_intermediate_size", "moe_inter_dim");
  c.n_routed_experts = r.integer("n_routed_experts");
  c.n_shared_experts = r.integer("n_shared_experts");
  c.num_experts_per_tok = r.integer("num_experts_per_tok", "n_activated_experts");
  c.num_hash_layers = r.integer("num_hash_layers", "n_hash_layers", 0);
  c.scoring_func = r.string("scoring_func", "score_func");
  c.topk_method = r.string("topk_method", "", "noaux_tc");
  c.norm_topk_prob = r.boolean("norm_topk_prob", true);
  c.routed_scaling_factor = r.number("routed_scaling_factor", "route_scale");
  c.swiglu_limit = r.number("swiglu_limit", "", 0.0);

  c.hc_mult = r.integer("hc_mult");
  c.hc_sinkhorn_iters = r.integer("hc_sinkhorn_iters");
  c.hc_eps = r.number("hc_eps", "", 1e-6);
  c.rms_norm_eps = r.number("rms_norm_eps", "norm_eps", 1e-6);

  const int64_t n_ratios = static_cast<int64_t>(c.compress_ratios.size());
  if (r.has("n_mtp_layers")) {
    c.n_mtp_layers = r.integer("n_mtp_layers");
  } else {
    c.n_mtp_layers = n_ratios - c.num_hidden_layers;
  }
  c.num_nextn_predict_layers = r.integer("num_nextn_predict_layers", "", c.n_mtp_layers);

  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  c.bos_token_id = r.integer("bos_token_id", "", 0);
  c.eos_token_id = r.integer("eos_token_id", "", 1);
  c.torch_dtype = r.string("torch_dtype", "", "bfloat16");
  c.hidden_act = r.string("hidden_act", "", "silu");

  // Linear weights: FP8 when quantization_config says so (HF) or dtype is "fp8" (reference); else bf16.
  if (r.has("quantization_config") && !j.at("quantization_config").is_null()) {
    const json& q = j.at("quantization_config");
    DSINFER_CHECK(q.is_object(), "config ", source, ": field 'quantization_config' must be an object");
    FieldReader qr(q, source);
    const std::string method = qr.string("quant_method");
    DSINFER_CHECK(method == "fp8", "config ", source, ": quantization_config.quant_method '", method,
                  "' is not supported (only fp8)");
    const std::string fmt = qr.string("fmt", "", "e4m3");
    // activation_scheme "dynamic" is the only one the reference knows; expert_dtype may sit here (V4.1).
    if (q.contains("expert_dtype") && !r.has("expert_dtype")) {
      const std::string e = qr.string("expert_dtype");
      DSINFER_CHECK(e == "fp4" || e == "fp8" || e == "bf16" || e == "bfloat16", "config ", source,
                    ": quantization_config.expert_dtype must be fp4, fp8 or bf16, got '", e, "'");
      c.expert_storage = e == "fp4" ? WeightStorage::kFP4 : e == "fp8" ? WeightStorage::kFP8 : WeightStorage::kBF16;
    }
    DSINFER_CHECK(fmt == "e4m3", "config ", source, ": quantization_config.fmt '", fmt, "' is not supported (only e4m3)");
    if (q.contains("weight_block_size")) {
      const auto block = qr.integers("weight_block_size");
      const std::vector<int64_t> want = {info->weight_block, info->weight_block};
      DSINFER_CHECK(block == want, "config ", source, ": quantization_config.weight_block_size ",
                    q.at("weight_block_size").dump(), " is not supported (", info->name, " uses [", want[0], ", ",
                    want[1], "])");
    } else {
      DSINFER_CHECK(!v41, "config ", source, ": quantization_config has no weight_block_size (", info->name,
                    " uses [32, 32], model-v41.md §1.5)");
    }
    if (q.contains("scale_fmt")) {
      const std::string sf = qr.string("scale_fmt");
      DSINFER_CHECK(sf == "ue8m0", "config ", source, ": quantization_config.scale_fmt '", sf,
                    "' is not supported (only ue8m0; F32 scale tensors are accepted at load time)");
    }
    c.linear_storage = WeightStorage::kFP8;
  } else {
    const std::string dtype = r.string("dtype", "", "bf16");
    c.linear_storage = dtype == "fp8" ? WeightStorage::kFP8 : WeightStorage::kBF16;
  }
  if (r.has("expert_dtype") && !j.at("expert_dtype").is_null()) {
    const std::string e = r.string("expert_dtype");
    if (e == "fp4") c.expert_storage = WeightStorage::kFP4;
    else if (e == "fp8") c.expert_storage = WeightStorage::kFP8;
    else if (e == "bf16" || e == "bfloat16") c.expert_storage = WeightStorage::kBF16;
    else core::fail("config ", source, ": field 'expert_dtype' must be fp4, fp8 or bf16, got '", e, "'");
  } else if (!(r.has("quantization_config") && j.at("quantization_config").is_object() &&
               j.at("quantization_config").contains("expert_dtype"))) {
    c.expert_storage = c.linear_storage;
  }

  if (r.has("dspark_block_size")) {
    DSparkConfig d;
    d.block_size = r.integer("dspark_block_size");
    d.noise_token_id = r.integer("dspark_noise_token_id");
    d.target_layer_ids = r.integers("dspark_target_layer_ids");
    d.markov_rank = r.integer("dspark_markov_rank");
    d.n_routed_experts = r.integer("dspark_n_routed_experts", "", 0);
    d.num_experts_per_tok = r.integer("dspark_num_experts_per_tok", "dspark_n_activated_experts", 0);
    c.dspark = d;
  }

  c.pad_token_id = r.integer("pad_token_id", "", -1);
  c.image_token_id = r.integer("image_token_id", "", -1);
  if (v41) {
    c.kv_source_layer_ids = r.integers("kv_source_layer_ids", "kv_source_layers");
    c.index_source_layer_ids = r.integers("index_source_layer_ids", "index_source_layers");
    c.candidate_source_layer_id = r.integer("candidate_source_layer_id", "candidate_source_layer", -1);
    c.candidate_topk_blocks = r.integer("candidate_topk_blocks", "", 0);
    c.candidate_block_size = r.integer("candidate_block_size", "", 0);
    c.gate_temp = r.number("gate_temp", "", 1.0);
    if (r.has("engram_layer_ids")) {
      EngramConfig e;
      e.layer_ids = r.integers("engram_layer_ids");
      e.num_embeddings = r.integers("engram_num_embeddings");
      e.max_ngram_size = r.integer("engram_max_ngram_size");
      e.vocab_size = r.integer("engram_vocab_size");
      e.n_heads = r.integer("engram_n_heads");
      e.head_dim = r.integer("engram_head_dim");
      e.pad_token_id = r.integer("engram_pad_token_id", "engram_pad_id");
      e.compressed_vocab_size = r.integer("engram_compressed_vocab_size");
      if (!e.layer_ids.empty()) c.engram = e;  // the reference's default: no Engram
    }
  } else {
    for (const char* v41_only : {"kv_source_layer_ids", "index_source_layer_ids", "engram_layer_ids",
                                 "candidate_source_layer_id"}) {
      DSINFER_CHECK(!r.has(v41_only), "config ", source, ": field '", v41_only, "' belongs to DeepseekV41ForCausalLM, ",
                    "not ", c.architecture);
    }
  }

  c.validate(source);
  c.roles = compute_layer_roles(c);
  return c;
}

void ModelConfig::validate(const std::string& source) const {
  auto need = [&](bool ok, const std::string& field, const std::string& why) {
    if (!ok) core::fail("config ", source, ": field '", field, "' ", why);
  };
  auto positive = [&](int64_t v, const char* field) {
    need(v > 0, field, core::str_cat("must be positive, got ", v));
  };

  const ArchitectureInfo* info = find_architecture(architecture);
  need(info != nullptr && info->id == arch, "architectures",
       core::str_cat("names '", architecture, "', which this engine does not know (known: ", known_architecture_names(),
                     ")"));
  need(model_type == info->model_type, "model_type",
       core::str_cat("must be '", info->model_type, "', got '", model_type, "'"));
  const bool v41 = arch == Architecture::kDeepseekV41;

  // Upper bounds first: later checks multiply fields.
  auto at_most = [&](int64_t v, const Limit& limit) {
    need(v <= limit.max, limit.field,
         core::str_cat("(", v, ") exceeds the limit of this engine, ", limit.max, " (V4-Flash has ", limit.v4_flash,
                       ")"));
  };
  at_most(vocab_size, kVocabSize);
  at_most(hidden_size, kHiddenSize);
  at_most(num_hidden_layers, kLayers);
  need(n_mtp_layers <= kMtpLayers.max, "n_mtp_layers",
       core::str_cat("(", n_mtp_layers, ", or len(compress_ratios) - num_hidden_layers when not given) exceeds the ",
                     "limit of this engine, ", kMtpLayers.max, " (V4-Flash has 1, V4-Flash-0731 3)"));
  at_most(num_attention_heads, kHeads);
  at_most(head_dim, kHeadDim);
  at_most(q_lora_rank, kQLoraRank);
  at_most(o_lora_rank, kOLoraRank);
  at_most(sliding_window, kSlidingWindow);
  at_most(max_position_embeddings, kMaxPositions);
  at_most(index_n_heads, kIndexHeads);
  at_most(index_head_dim, kIndexHeadDim);
  at_most(index_topk, kIndexTopk);
  at_most(moe_intermediate_size, kMoeInter);
  at_most(n_routed_experts, kRoutedExperts);
  at_most(n_shared_experts, kSharedExperts);
  at_most(hc_mult, kHcMult);
  at_most(hc_sinkhorn_iters, kSinkhornIters);
  // Every (layer, expert) pair has its own tensors: the inventory and the loader's tables scale with it.
  const int64_t stage_experts = dspark && dspark->n_routed_experts > 0 ? dspark->n_routed_experts : n_routed_experts;
  need(n_routed_experts <= 0 || num_hidden_layers <= 0 || n_mtp_layers < 0 || stage_experts < 0 ||
           n_routed_experts * num_hidden_layers + stage_experts * n_mtp_layers <= kMaxExpertInstances,
       "n_routed_experts",
       core::str_cat("(", n_routed_experts, ") times the ", num_hidden_layers + n_mtp_layers,
                     " layers incl. MTP stages exceeds the limit of this engine, ", kMaxExpertInstances,
                     " expert instances (V4-Flash has 256 x 44 = 11264)"));
  if (rope_scaling) {
    need(rope_scaling->original_max_position_embeddings <= kMaxPositions.max,
         "rope_scaling.original_max_position_embeddings",
         core::str_cat("(", rope_scaling->original_max_position_embeddings, ") exceeds the limit of this engine, ",
                       kMaxPositions.max, " (V4-Flash has 65536)"));
    need(std::isfinite(rope_scaling->factor) && rope_scaling->factor <= 1024, "rope_scaling.factor",
         core::str_cat("(", rope_scaling->factor, ") must be at most 1024 (V4-Flash has 16)"));
  }
  if (dspark) {
    at_most(dspark->block_size, kDsparkBlock);
    at_most(dspark->markov_rank, kMarkovRank);
    need(dspark->n_routed_experts >= 0 && dspark->n_routed_experts <= kRoutedExperts.max, "dspark_n_routed_experts",
         core::str_cat("(", dspark->n_routed_experts, ") must be in [0, ", kRoutedExperts.max, "] (0: as the backbone)"));
  }
  if (v41) {
    at_most(candidate_topk_blocks, kCandidateBlocks);
    at_most(candidate_block_size, kCandidateBlockSize);
    if (engram) {
      need(engram->layer_ids.size() <= static_cast<size_t>(kEngramLayers.max), "engram_layer_ids",
           core::str_cat("has ", engram->layer_ids.size(), " entries, more than the limit of this engine, ",
                         kEngramLayers.max, " (V4.1-Flash has 2)"));
      at_most(engram->max_ngram_size, kEngramNgram);
      at_most(engram->n_heads, kEngramHeads);
      at_most(engram->head_dim, kEngramHeadDim);
      at_most(engram->vocab_size, kEngramVocab);
    }
  }

  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  need(num_key_value_heads == 1, "num_key_value_heads",
       core::str_cat("must be 1 (V4 shares one K = V vector across heads), got ", num_key_value_heads));
  positive(head_dim, "head_dim");
  positive(qk_rope_head_dim, "qk_rope_head_dim");
  need(qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", core::str_cat("must be even (interleaved pairs), got ", qk_rope_head_dim));
  need(qk_rope_head_dim < head_dim, "qk_rope_head_dim",
       core::str_cat("(", qk_rope_head_dim, ") must be smaller than head_dim (", head_dim, ")"));
  if (!v41) {  // V4.1 quantizes the whole vector in blocks of 32 (checked with the schedule)
    need(nope_head_dim() % 64 == 0, "head_dim",
         core::str_cat("minus qk_rope_head_dim (", head_dim, " - ", qk_rope_head_dim, " = ", nope_head_dim(),
                       ") must be divisible by 64 (FP8 QDQ of the nope dims uses blocks of 64)"));
  }
  positive(q_lora_rank, "q_lora_rank");
  positive(o_groups, "o_groups");
  positive(o_lora_rank, "o_lora_rank");
  need(num_attention_heads % o_groups == 0, "num_attention_heads",
       core::str_cat("(", num_attention_heads, ") must be divisible by o_groups (", o_groups, ")"));
  positive(sliding_window, "sliding_window");
  need(rope_theta > 0, "rope_theta", core::str_cat("must be positive, got ", rope_theta));
  need(compress_rope_theta > 0, "compress_rope_theta", core::str_cat("must be positive, got ", compress_rope_theta));
  if (rope_scaling) {
    need(rope_scaling->type == "yarn", "rope_scaling.type", core::str_cat("must be 'yarn', got '", rope_scaling->type, "'"));
    need(rope_scaling->factor >= 1.0, "rope_scaling.factor", core::str_cat("must be >= 1, got ", rope_scaling->factor));
    need(rope_scaling->original_max_position_embeddings > 0, "rope_scaling.original_max_position_embeddings",
         core::str_cat("must be positive, got ", rope_scaling->original_max_position_embeddings));
    need(rope_scaling->beta_fast > rope_scaling->beta_slow && rope_scaling->beta_slow > 0, "rope_scaling.beta_fast",
         core::str_cat("and beta_slow must satisfy beta_fast > beta_slow > 0, got ", rope_scaling->beta_fast, " / ",
                       rope_scaling->beta_slow));
  }
  positive(max_position_embeddings, "max_position_embeddings");

  positive(index_n_heads, "index_n_heads");
  if (v41) {  // no Hadamard rotation in V4.1 (model-v41.md §2.7.2)
    need(index_head_dim >= 32 && index_head_dim % 32 == 0, "index_head_dim",
         core::str_cat("must be a positive multiple of 32 (FP4 QDQ blocks of 32), got ", index_head_dim));
  } else {
    need(is_power_of_two(index_head_dim) && index_head_dim >= 32, "index_head_dim",
         core::str_cat("must be a power of two >= 32 (Hadamard rotation + FP4 QDQ blocks of 32), got ", index_head_dim));
  }
  need(index_head_dim >= qk_rope_head_dim, "index_head_dim",
       core::str_cat("(", index_head_dim, ") must hold the qk_rope_head_dim (", qk_rope_head_dim, ") rotary dims"));
  positive(index_topk, "index_topk");
  // A CSA layer has max_position_embeddings / 4 entries at most: a larger top-k can never be filled.
  // (V4.1's ratio-1 layers hold one entry per position.)
  const int64_t min_ratio = v41 ? 1 : 4;
  need(index_topk <= std::max<int64_t>(1, max_position_embeddings / min_ratio), "index_topk",
       core::str_cat("(", index_topk, ") exceeds the ", max_position_embeddings / min_ratio,
                     " compressed entries a layer of ratio ", min_ratio, " holds at max_position_embeddings (",
                     max_position_embeddings, ")"));

  positive(moe_intermediate_size, "moe_intermediate_size");
  positive(n_routed_experts, "n_routed_experts");
  need(n_shared_experts >= 0, "n_shared_experts", core::str_cat("must be >= 0, got ", n_shared_experts));
  positive(num_experts_per_tok, "num_experts_per_tok");
  need(num_experts_per_tok <= n_routed_experts, "num_experts_per_tok",
       core::str_cat("(", num_experts_per_tok, ") must not exceed n_routed_experts (", n_routed_experts, ")"));
  need(num_hash_layers >= 0 && num_hash_layers <= num_hidden_layers, "num_hash_layers",
       core::str_cat("(", num_hash_layers, ") must be in [0, num_hidden_layers = ", num_hidden_layers, "]"));
  need(scoring_func == "sqrtsoftplus" || scoring_func == "softmax" || scoring_func == "sigmoid", "scoring_func",
       core::str_cat("must be sqrtsoftplus, softmax or sigmoid, got '", scoring_func, "'"));
  need(topk_method == "noaux_tc", "topk_method", core::str_cat("must be 'noaux_tc', got '", topk_method, "'"));
  need(routed_scaling_factor > 0, "routed_scaling_factor", core::str_cat("must be positive, got ", routed_scaling_factor));
  need(swiglu_limit >= 0, "swiglu_limit", core::str_cat("must be >= 0 (0 = no clamp), got ", swiglu_limit));
  need(hidden_act == "silu", "hidden_act", core::str_cat("must be 'silu', got '", hidden_act, "'"));

  positive(hc_mult, "hc_mult");
  positive(hc_sinkhorn_iters, "hc_sinkhorn_iters");
  need(hc_eps > 0, "hc_eps", core::str_cat("must be positive, got ", hc_eps));
  need(rms_norm_eps > 0, "rms_norm_eps", core::str_cat("must be positive, got ", rms_norm_eps));
  need(!tie_word_embeddings, "tie_word_embeddings", "must be false (V4 and V4.1 have separate embed.weight and head.weight)");
  need(bos_token_id >= 0 && bos_token_id < vocab_size, "bos_token_id",
       core::str_cat("(", bos_token_id, ") must be a token id below vocab_size (", vocab_size, ")"));
  need(eos_token_id >= 0 && eos_token_id < vocab_size, "eos_token_id",
       core::str_cat("(", eos_token_id, ") must be a token id below vocab_size (", vocab_size, ")"));

  // Layer schedule.
  const int64_t n_ratios = static_cast<int64_t>(compress_ratios.size());
  need(n_mtp_layers >= 0, "compress_ratios",
       core::str_cat("has ", n_ratios, " entries, fewer than num_hidden_layers (", num_hidden_layers, ")"));
  need(n_ratios == num_hidden_layers + n_mtp_layers, "compress_ratios",
       core::str_cat("has ", n_ratios, " entries; it needs num_hidden_layers + MTP stages = ", num_hidden_layers, " + ",
                     n_mtp_layers, " = ", num_hidden_layers + n_mtp_layers));
  need(num_nextn_predict_layers >= 0, "num_nextn_predict_layers",
       core::str_cat("must be >= 0, got ", num_nextn_predict_layers));
  need(n_mtp_layers >= std::min<int64_t>(num_nextn_predict_layers, 1), "compress_ratios",
       core::str_cat("has no entry for the MTP layer (num_nextn_predict_layers = ", num_nextn_predict_layers,
                     "): it needs num_hidden_layers + 1 entries, the last one 0"));
  int64_t max_ratio = 0, block_tokens = 128;
  for (int64_t L = 0; L < n_ratios; ++L) {
    const int64_t r = compress_ratios[static_cast<size_t>(L)];
    need(r >= 0, core::str_cat("compress_ratios[", L, "]"), core::str_cat("must be >= 0, got ", r));
    need(r <= kCompressRatio.max, core::str_cat("compress_ratios[", L, "]"),
         core::str_cat("(", r, ") exceeds the limit of this engine, ", kCompressRatio.max, " (V4-Flash: 4 and 128)"));
    if (r > 0) {
      block_tokens = std::lcm(block_tokens, r);  // both <= 4096: no overflow
      need(block_tokens <= kBlockTokens.max, core::str_cat("compress_ratios[", L, "]"),
           core::str_cat("(", r, ") makes the compressed block (the least common multiple of 128 and the ratios) ",
                         block_tokens, " positions, more than the limit ", kBlockTokens.max, " (V4-Flash: 128)"));
    }
    need(L < num_hidden_layers || r == 0, core::str_cat("compress_ratios[", L, "]"),
         core::str_cat("belongs to MTP stage ", L - num_hidden_layers, " and must be 0 (SWA only), got ", r));
    max_ratio = std::max(max_ratio, r);
  }
  need(sliding_window >= max_ratio, "sliding_window",
       core::str_cat("(", sliding_window, ") must be >= the largest compress ratio (", max_ratio,
                     ") so the window covers the uncompressed tail"));

  // Every K dimension of an FP8/FP4 GEMM is blocked by the weight block (activation quant, weight
  // blocks, FP4->FP8): 128 in V4, 32 in V4.1.
  auto k_dim = [&](int64_t v, const std::string& field, const std::string& what) {
    need(v % weight_block == 0, field,
         core::str_cat(what, " (", v, ") must be divisible by ", weight_block,
                       ": it is the K dimension of FP8/FP4 weights"));
  };
  if (linear_storage != WeightStorage::kBF16 || expert_storage != WeightStorage::kBF16) {
    k_dim(hidden_size, "hidden_size", "hidden_size");
    k_dim(moe_intermediate_size, "moe_intermediate_size", "moe_intermediate_size");
  }
  if (linear_storage != WeightStorage::kBF16) {
    k_dim(q_lora_rank, "q_lora_rank", "q_lora_rank");
    k_dim(o_groups * o_lora_rank, "o_lora_rank", "o_groups * o_lora_rank");
  }

  if (dspark) {
    need(n_mtp_layers >= 1, "dspark_block_size", "is set but the config has no draft stage (compress_ratios has no entry after the backbone)");
    need(dspark->block_size >= 1, "dspark_block_size", core::str_cat("must be positive, got ", dspark->block_size));
    need(dspark->noise_token_id >= 0 && dspark->noise_token_id < vocab_size, "dspark_noise_token_id",
         core::str_cat("(", dspark->noise_token_id, ") must be below vocab_size (", vocab_size, ")"));
    need(!dspark->target_layer_ids.empty(), "dspark_target_layer_ids", "must not be empty");
    need(static_cast<int64_t>(dspark->target_layer_ids.size()) <= num_hidden_layers, "dspark_target_layer_ids",
         core::str_cat("has ", dspark->target_layer_ids.size(), " entries, more than the ", num_hidden_layers,
                       " backbone layers"));
    for (int64_t id : dspark->target_layer_ids) {
      need(id >= 0 && id < num_hidden_layers, "dspark_target_layer_ids",
           core::str_cat("entry ", id, " is not a backbone layer in [0, ", num_hidden_layers, ")"));
    }
    positive(dspark->markov_rank, "dspark_markov_rank");
    if (linear_storage != WeightStorage::kBF16) {
      k_dim(hidden_size * static_cast<int64_t>(dspark->target_layer_ids.size()), "dspark_target_layer_ids",
            "hidden_size * len(dspark_target_layer_ids)");
    }
    if (dspark->n_routed_experts > 0) {
      const int64_t k = dspark->num_experts_per_tok > 0 ? dspark->num_experts_per_tok : num_experts_per_tok;
      need(k <= dspark->n_routed_experts, "dspark_num_experts_per_tok",
           core::str_cat("(", k, ") must not exceed dspark_n_routed_experts (", dspark->n_routed_experts, ")"));
    }
    need(dspark->num_experts_per_tok >= 0, "dspark_num_experts_per_tok",
         core::str_cat("must be >= 0 (0: as the backbone), got ", dspark->num_experts_per_tok));
  }

  if (!v41) return;
  // ---- V4.1 (model-v41.md §1.3, §1.5) ----
  need(num_hash_layers == 0, "num_hash_layers", core::str_cat("must be 0: V4.1 has no hash-routed layers, got ", num_hash_layers));
  need(n_mtp_layers == 0 || dspark.has_value(), "dspark_block_size",
       "is missing: the draft stages of V4.1 are DSpark stages (model-v41.md §2.12)");
  need(num_nextn_predict_layers == n_mtp_layers, "num_nextn_predict_layers",
       core::str_cat("(", num_nextn_predict_layers, ") must equal the number of draft stages, len(compress_ratios) - ",
                     "num_hidden_layers = ", n_mtp_layers, " (model-v41.md §1.1)"));
  need(std::isfinite(gate_temp) && gate_temp > 0, "gate_temp", core::str_cat("must be positive, got ", gate_temp));
  need(pad_token_id >= -1 && pad_token_id < vocab_size, "pad_token_id",
       core::str_cat("(", pad_token_id, ") must be a token id below vocab_size (", vocab_size, ")"));
  need(image_token_id >= -1 && image_token_id < vocab_size, "image_token_id",
       core::str_cat("(", image_token_id, ") must be a token id below vocab_size (", vocab_size, ")"));
  need(rope_scaling.has_value(), "rope_scaling", "is missing: every compressed V4.1 layer uses YaRN (model-v41.md §2.4.1)");
  need(head_dim % 16 == 0, "head_dim", core::str_cat("(", head_dim, ") must be a multiple of 16 (§1.3 rule 7)"));
  if (engram) {
    const EngramConfig& e = *engram;
    need(e.max_ngram_size >= 2, "engram_max_ngram_size", core::str_cat("must be >= 2 (n-grams of 2..N tokens), got ", e.max_ngram_size));
    positive(e.n_heads, "engram_n_heads");
    positive(e.head_dim, "engram_head_dim");
    need(e.vocab_size >= 2, "engram_vocab_size", core::str_cat("must be >= 2 (the prime search starts there), got ", e.vocab_size));
    need(e.compressed_vocab_size >= 1 && e.compressed_vocab_size <= vocab_size, "engram_compressed_vocab_size",
         core::str_cat("(", e.compressed_vocab_size, ") must be in [1, vocab_size = ", vocab_size, "]"));
    need(e.pad_token_id >= 0 && e.pad_token_id < vocab_size, "engram_pad_token_id",
         core::str_cat("(", e.pad_token_id, ") must be a token id below vocab_size (", vocab_size, ")"));
    for (size_t k = 0; k < e.num_embeddings.size(); ++k) {
      need(e.num_embeddings[k] > 0, "engram_num_embeddings", core::str_cat("[", k, "] must be positive, got ", e.num_embeddings[k]));
    }
    if (linear_storage != WeightStorage::kBF16) {
      k_dim(e.columns() * e.head_dim, "engram_head_dim", "(engram_max_ngram_size - 1) * engram_n_heads * engram_head_dim");
    }
  }
  check_v41_schedule(*this, source);
}

ModelConfig ModelConfig::parse(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    core::fail("config ", source, ": invalid JSON: ", e.what());
  }
  return from_json(j, source);
}

ModelConfig ModelConfig::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DSINFER_CHECK(in.good(), "config ", path, ": cannot open");
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  DSINFER_CHECK(text.size() <= kMaxConfigBytes, "config ", path, ": larger than ", kMaxConfigBytes,
                " bytes, not a model config (V4-Flash's is ~3 KB)");
  return parse(text, path);
}

namespace {

std::string list_string(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += core::str_cat(i ? ", " : "", v[i]);
  return out + "]";
}

// V4.1: the layer schedule as roles (model-v41.md §1.3).
std::string summary_v41(const ModelConfig& c) {
  std::ostringstream o;
  int64_t by_ratio[3] = {0, 0, 0};
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) ++by_ratio[std::clamp<int64_t>(c.compress_ratio(L), 0, 2)];
  o << c.architecture << " (" << c.model_type << ")\n"
    << "  vocab " << c.vocab_size << ", hidden " << c.hidden_size << ", layers " << c.num_hidden_layers << " ("
    << by_ratio[0] << " SWA, " << by_ratio[2] << " ratio 2, " << by_ratio[1] << " ratio 1) + " << c.n_mtp_layers
    << " DSpark stage(s)\n"
    << "  attention: " << c.num_attention_heads << " heads x " << c.head_dim << " (rope " << c.qk_rope_head_dim
    << "), q_lora " << c.q_lora_rank << ", o_groups " << c.o_groups << " x o_lora " << c.o_lora_rank << ", window "
    << c.sliding_window << ", no per-head q norm, deferred mHC mixing\n"
    << "  CSA2: kv sources " << list_string(c.kv_source_layer_ids) << ", index sources "
    << list_string(c.index_source_layer_ids) << ", indexer " << c.index_n_heads << " heads x " << c.index_head_dim
    << ", top-" << c.index_topk << "\n";
  if (c.candidate_source_layer_id >= 0) {
    o << "  candidates: source layer " << c.candidate_source_layer_id << ", " << c.candidate_topk_blocks
      << " blocks of " << c.candidate_block_size << "\n";
  }
  o << "  layer roles:";
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const LayerRoles& r = c.layer_roles(L);
    o << (L % 8 == 0 ? "\n    " : "  ") << L << ":r" << r.ratio;
    if (r.ratio > 0) o << " kv" << r.kv_source << " ix" << r.index_source;
    if (r.owns_compressor) o << " C";
    if (r.owns_indexer) o << " I";
    if (r.candidate_source) o << " Cs";
    if (r.candidate_user) o << " Cu";
    if (r.engram >= 0) o << " E";
    if (r.dspark_target) o << " T";
  }
  o << "\n    (kvN/ixN: kv / index source; C compressor, I indexer, Cs/Cu candidate source/user, E Engram, T DSpark tap)\n";
  if (c.engram) {
    const EngramConfig& e = *c.engram;
    o << "  engram: layers " << list_string(e.layer_ids) << ", rows " << list_string(e.num_embeddings) << ", "
      << "2.." << e.max_ngram_size << "-grams x " << e.n_heads << " heads x " << e.head_dim << ", primes from "
      << e.vocab_size << ", compressed vocab " << e.compressed_vocab_size << "\n";
  }
  o << "  moe: " << c.n_routed_experts << " routed (top-" << c.num_experts_per_tok << ") + " << c.n_shared_experts
    << " shared, intermediate " << c.moe_intermediate_size << ", " << c.scoring_func << ", scale "
    << c.routed_scaling_factor << ", gate_temp " << c.gate_temp << ", swiglu limit " << c.swiglu_limit << "\n"
    << "  mHC: " << c.hc_mult << " streams, " << c.hc_sinkhorn_iters << " Sinkhorn iterations\n"
    << "  weights: linear " << weight_storage_name(c.linear_storage) << ", experts "
    << weight_storage_name(c.expert_storage) << ", FP8 blocks " << c.weight_block << "x" << c.weight_block << "\n";
  if (c.dspark) {
    const DSparkConfig& d = *c.dspark;
    o << "  dspark: block " << d.block_size << ", noise token " << d.noise_token_id << ", markov rank "
      << d.markov_rank << ", targets " << list_string(d.target_layer_ids) << ", " << c.routed_experts_of(c.num_hidden_layers)
      << " experts top-" << c.experts_per_tok_of(c.num_hidden_layers) << "\n";
  }
  return o.str();
}

}  // namespace

std::string ModelConfig::summary() const {
  if (arch == Architecture::kDeepseekV41) return summary_v41(*this);
  int64_t swa = 0, csa = 0, hca = 0;
  for (int64_t L = 0; L < num_hidden_layers; ++L) {
    if (is_csa(L)) ++csa;
    else if (is_hca(L)) ++hca;
    else ++swa;
  }
  std::ostringstream o;
  o << architecture << " (" << model_type << ")\n"
    << "  vocab " << vocab_size << ", hidden " << hidden_size << ", layers " << num_hidden_layers << " (" << swa
    << " SWA, " << csa << " CSA, " << hca << " HCA) + " << n_mtp_layers << (dspark ? " DSpark" : " MTP")
    << " stage(s), hash-routed layers " << num_hash_layers << "\n"
    << "  attention: " << num_attention_heads << " heads x " << head_dim << " (rope " << qk_rope_head_dim
    << "), q_lora " << q_lora_rank << ", o_groups " << o_groups << " x o_lora " << o_lora_rank << ", window "
    << sliding_window << "\n"
    << "  indexer: " << index_n_heads << " heads x " << index_head_dim << ", top-" << index_topk << "\n"
    << "  moe: " << n_routed_experts << " routed (top-" << num_experts_per_tok << ") + " << n_shared_experts
    << " shared, intermediate " << moe_intermediate_size << ", " << scoring_func << ", scale "
    << routed_scaling_factor << ", swiglu limit " << swiglu_limit << "\n"
    << "  mHC: " << hc_mult << " streams, " << hc_sinkhorn_iters << " Sinkhorn iterations\n"
    << "  weights: linear " << weight_storage_name(linear_storage) << ", experts "
    << weight_storage_name(expert_storage) << "\n";
  if (dspark) {
    o << "  dspark: block " << dspark->block_size << ", noise token " << dspark->noise_token_id << ", markov rank "
      << dspark->markov_rank << ", targets [";
    for (size_t i = 0; i < dspark->target_layer_ids.size(); ++i) o << (i ? ", " : "") << dspark->target_layer_ids[i];
    o << "]\n";
  }
  return o.str();
}

}  // namespace dsinfer::model
