#include "model/inventory.h"

#include "core/error.h"

namespace dsinfer::model {
namespace {

using core::DType;

class Builder {
 public:
  explicit Builder(const ModelConfig& c) : c_(c) {}

  void tensor(const std::string& name, DType dtype, std::vector<int64_t> shape, TensorKind kind) {
    TensorSpec s;
    s.name = name;
    s.dtype = dtype;
    s.shape = std::move(shape);
    s.kind = kind;
    s.layer = layer_;
    out.push_back(std::move(s));
  }

  // A linear weight [rows, cols] stored as `storage`, plus its scale grid when quantized.
  void linear(const std::string& prefix, int64_t rows, int64_t cols, WeightStorage storage) {
    TensorSpec w;
    w.name = prefix + ".weight";
    w.kind = TensorKind::kLinearWeight;
    w.layer = layer_;
    w.linear = prefix;
    w.storage = storage;
    w.rows = rows;
    w.cols = cols;
    switch (storage) {
      case WeightStorage::kBF16:
        w.dtype = DType::kBF16;
        w.shape = {rows, cols};
        out.push_back(w);
        return;
      case WeightStorage::kFP8:
        w.dtype = DType::kF8E4M3;
        w.shape = {rows, cols};
        break;
      case WeightStorage::kFP4:
        w.dtype = DType::kI8;
        w.shape = {rows, cols / 2};
        break;
    }
    out.push_back(w);
    TensorSpec s = w;
    s.name = prefix + ".scale";
    s.kind = TensorKind::kLinearScale;
    s.dtype = DType::kF8E8M0;
    const int64_t b = c_.weight_block;
    s.shape = storage == WeightStorage::kFP8 ? std::vector<int64_t>{(rows + b - 1) / b, (cols + b - 1) / b}
                                             : std::vector<int64_t>{rows, cols / 32};
    out.push_back(std::move(s));
  }

  void norm(const std::string& name, int64_t dim) { tensor(name, DType::kBF16, {dim}, TensorKind::kNorm); }

  void hc(const std::string& prefix, int64_t mix, int64_t n_scales) {
    tensor(prefix + "_fn", DType::kF32, {mix, c_.hc_dim()}, TensorKind::kHcFn);
    tensor(prefix + "_base", DType::kF32, {mix}, TensorKind::kHcBase);
    tensor(prefix + "_scale", DType::kF32, {n_scales}, TensorKind::kHcScale);
  }

  void hc_head(const std::string& prefix) { hc(prefix + "hc_head", c_.hc_mult, 1); }

  void compressor(const std::string& prefix, int64_t ratio, int64_t out_dim) {
    const int64_t width = (ratio == 4 ? 2 : 1) * out_dim;  // overlap mode keeps two halves
    linear(prefix + "wkv", width, c_.hidden_size, WeightStorage::kBF16);
    linear(prefix + "wgate", width, c_.hidden_size, WeightStorage::kBF16);
    tensor(prefix + "ape", DType::kF32, {ratio, width}, TensorKind::kApe);
    norm(prefix + "norm.weight", out_dim);
  }

  // What every V4-family block starts with (model-v4.md §4.2, model-v41.md §4.2 keep it): norms, the
  // two mHC mixes and the attention's own projections.
  void block_norms_and_attention(const std::string& p) {
    const int64_t d = c_.hidden_size, nh = c_.num_attention_heads, hd = c_.head_dim;
    const WeightStorage lin = c_.linear_storage;
    norm(p + "attn_norm.weight", d);
    norm(p + "ffn_norm.weight", d);
    hc(p + "hc_attn", c_.hc_mix_dim(), 3);
    hc(p + "hc_ffn", c_.hc_mix_dim(), 3);

    const std::string a = p + "attn.";
    tensor(a + "attn_sink", DType::kF32, {nh}, TensorKind::kAttnSink);
    linear(a + "wq_a", c_.q_lora_rank, d, lin);
    norm(a + "q_norm.weight", c_.q_lora_rank);
    linear(a + "wq_b", nh * hd, c_.q_lora_rank, lin);
    linear(a + "wkv", hd, d, lin);
    norm(a + "kv_norm.weight", hd);
    linear(a + "wo_a", c_.o_groups * c_.o_lora_rank, nh * hd / c_.o_groups, lin);
    linear(a + "wo_b", d, c_.o_groups * c_.o_lora_rank, lin);
  }

  // The V4.1 block (model-v41.md §4.2): what a layer holds follows its roles.
  void block_v41(int64_t L) {
    layer_ = L;
    const LayerRoles& roles = c_.layer_roles(L);
    const std::string p = c_.layer_prefix(L);
    const int64_t d = c_.hidden_size, hd = c_.head_dim;
    const WeightStorage lin = c_.linear_storage;
    block_norms_and_attention(p);
    const std::string a = p + "attn.";
    const std::string ix = a + "indexer.";
    if (roles.owns_compressor) {  // §2.6: no ape, no overlap; wgate only for ratio 2; the index keys' wk
      const std::string cp = a + "compressor.";
      linear(cp + "wkv", hd, d, WeightStorage::kBF16);
      if (roles.ratio == 2) linear(cp + "wgate", hd, d, WeightStorage::kBF16);
      norm(cp + "norm.weight", hd);
      linear(ix + "wk", c_.index_head_dim, hd, WeightStorage::kBF16);
      norm(ix + "k_norm.weight", c_.index_head_dim);
    }
    if (roles.owns_indexer) {
      linear(ix + "wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank, lin);
      linear(ix + "weights_proj", c_.index_n_heads, d, WeightStorage::kBF16);
    }
    if (roles.engram >= 0) {
      const EngramConfig& e = *c_.engram;
      const std::string en = p + "engram.";
      const int64_t rows = e.num_embeddings[static_cast<size_t>(roles.engram)];
      tensor(en + "embed.weight", DType::kF8E4M3, {rows, e.head_dim}, TensorKind::kEngramTable);
      out.back().linear = en + "embed";  // the scale travels with its table (mkmodel writes them together)
      tensor(en + "embed.scale", DType::kF8E8M0, {rows, e.head_dim / 32}, TensorKind::kEngramScale);
      out.back().linear = en + "embed";
      linear(en + "wkv", (c_.hc_mult + 1) * d, e.columns() * e.head_dim, lin);
      tensor(en + "q_weight", DType::kBF16, {c_.hc_mult, d}, TensorKind::kEngramGate);
      tensor(en + "k_weight", DType::kBF16, {c_.hc_mult, d}, TensorKind::kEngramGate);
    }
    ffn(L, p + "ffn.");
  }

  // The MoE of a layer: router (gate.bias, and V4.1's gate.bias_vl for image spans), routed and shared
  // experts.
  void ffn(int64_t L, const std::string& f) {
    const int64_t d = c_.hidden_size;
    const int64_t E = c_.routed_experts_of(L), I = c_.moe_intermediate_size;
    linear(f + "gate", E, d, WeightStorage::kBF16);
    if (c_.is_hash_layer(L)) {
      tensor(f + "gate.tid2eid", DType::kI64, {c_.vocab_size, c_.num_experts_per_tok}, TensorKind::kTid2Eid);
    } else {
      tensor(f + "gate.bias", DType::kF32, {E}, TensorKind::kGateBias);
    }
    if (c_.arch == Architecture::kDeepseekV41) tensor(f + "gate.bias_vl", DType::kF32, {E}, TensorKind::kGateBias);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = core::str_cat(f, "experts.", e, ".");
      linear(x + "w1", I, d, c_.expert_storage);
      linear(x + "w2", d, I, c_.expert_storage);
      linear(x + "w3", I, d, c_.expert_storage);
    }
    if (c_.n_shared_experts > 0) {
      const int64_t Is = I * c_.n_shared_experts;
      linear(f + "shared_experts.w1", Is, d, c_.linear_storage);
      linear(f + "shared_experts.w2", d, Is, c_.linear_storage);
      linear(f + "shared_experts.w3", Is, d, c_.linear_storage);
    }
  }

  void block(int64_t L) {
    if (c_.arch == Architecture::kDeepseekV41) {
      block_v41(L);
      return;
    }
    layer_ = L;
    const std::string p = c_.layer_prefix(L);
    const int64_t d = c_.hidden_size, hd = c_.head_dim;
    const WeightStorage lin = c_.linear_storage;
    block_norms_and_attention(p);
    const std::string a = p + "attn.";
    const int64_t ratio = c_.compress_ratio(L);
    if (ratio != 0) compressor(a + "compressor.", ratio, hd);
    if (ratio == 4) {
      const std::string ix = a + "indexer.";
      linear(ix + "wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank, lin);
      linear(ix + "weights_proj", c_.index_n_heads, d, WeightStorage::kBF16);
      compressor(ix + "compressor.", ratio, c_.index_head_dim);
    }

    ffn(L, p + "ffn.");
  }

  void mtp_stage(int64_t k) {
    const int64_t L = c_.num_hidden_layers + k;
    block(L);
    const std::string p = c_.layer_prefix(L);
    const int64_t d = c_.hidden_size;
    if (!c_.dspark) {
      linear(p + "e_proj", d, d, c_.linear_storage);
      linear(p + "h_proj", d, d, c_.linear_storage);
      norm(p + "enorm.weight", d);
      norm(p + "hnorm.weight", d);
      norm(p + "norm.weight", d);
      hc_head(p);
      return;
    }
    const auto& ds = *c_.dspark;
    if (k == 0) {
      linear(p + "main_proj", d, d * static_cast<int64_t>(ds.target_layer_ids.size()), c_.linear_storage);
      norm(p + "main_norm.weight", d);
    }
    if (k == c_.n_mtp_layers - 1 && c_.arch == Architecture::kDeepseekV41) {
      // §2.12: no hc_head (the head collapses with the last FFN's pre); Markov tensors embed / head.
      norm(p + "norm.weight", d);
      tensor(p + "markov_head.embed.weight", DType::kBF16, {c_.vocab_size, ds.markov_rank}, TensorKind::kEmbedding);
      linear(p + "markov_head.head", c_.vocab_size, ds.markov_rank, WeightStorage::kBF16);
      linear(p + "confidence_head.proj", 1, d + ds.markov_rank, WeightStorage::kBF16);
    } else if (k == c_.n_mtp_layers - 1) {
      norm(p + "norm.weight", d);
      hc_head(p);
      tensor(p + "markov_head.markov_w1.weight", DType::kBF16, {c_.vocab_size, ds.markov_rank}, TensorKind::kEmbedding);
      linear(p + "markov_head.markov_w2", c_.vocab_size, ds.markov_rank, WeightStorage::kBF16);
      linear(p + "confidence_head.proj", 1, d + ds.markov_rank, WeightStorage::kBF16);
    }
  }

  void all() {
    layer_ = -1;
    const int64_t d = c_.hidden_size;
    tensor("embed.weight", DType::kBF16, {c_.vocab_size, d}, TensorKind::kEmbedding);
    linear("head", c_.vocab_size, d, WeightStorage::kBF16);
    norm("norm.weight", d);
    if (!c_.deferred_mix) hc_head("");  // V4.1 has no hc_head (model-v41.md §2.1)
    for (int64_t L = 0; L < c_.num_hidden_layers; ++L) block(L);
    for (int64_t k = 0; k < c_.n_mtp_layers; ++k) mtp_stage(k);
  }

  std::vector<TensorSpec> out;

 private:
  const ModelConfig& c_;
  int64_t layer_ = -1;
};

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& config) {
  Builder b(config);
  b.all();
  return std::move(b.out);
}

std::vector<std::string> linear_names(const ModelConfig& config) {
  std::vector<std::string> names;
  for (const auto& t : expected_tensors(config)) {
    if (t.kind == TensorKind::kLinearWeight) names.push_back(t.linear);
  }
  return names;
}

}  // namespace dsinfer::model
