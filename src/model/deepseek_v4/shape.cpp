#include "model/deepseek_v4/shape.h"

#include <numeric>

#include "core/error.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sink_attention.h"

namespace dsinfer::model::deepseek_v4 {

NumericsMode parse_numerics_mode(const std::string& name) {
  if (name == "exact" || name == "plain") return NumericsMode::kExact;
  if (name == "reference") return NumericsMode::kReference;
  if (name == "fast") return NumericsMode::kFast;
  core::fail("numerics must be 'exact', 'reference' or 'fast', got '", name, "'");
}

ModelShape ModelShape::build(const ModelConfig& c, const Numerics& numerics, int64_t max_draft) {
  ModelShape s;
  s.config = c;
  s.numerics = numerics;
  s.numerics.act_block = c.activation_block;
  const std::string src = "config of the DeepSeek-V4 forward";
  DSINFER_CHECK(c.architecture.empty() || c.architecture == "DeepseekV4ForCausalLM", src, ": architecture ",
                c.architecture, " is not DeepseekV4ForCausalLM",
                c.arch == Architecture::kDeepseekV41 ? " (the V4.1 forward pass is not implemented yet; inspect and "
                                                       "mkmodel support V4.1)"
                                                     : "");
  DSINFER_CHECK(!c.dspark.has_value(), src, ": DSpark drafter checkpoints are not supported yet (MTP only)");
  DSINFER_CHECK(c.scoring_func.empty() || c.scoring_func == "sqrtsoftplus", src, ": scoring_func ", c.scoring_func,
                " is not supported (sqrtsoftplus only)");
  DSINFER_CHECK(c.n_shared_experts == 1, src, ": n_shared_experts must be 1, got ", c.n_shared_experts);
  DSINFER_CHECK(max_draft >= 0, "max_draft must be >= 0, got ", max_draft);
  s.vocab = c.vocab_size;
  s.dim = c.hidden_size;
  s.hc = c.hc_mult;
  s.heads = c.num_attention_heads;
  s.head_dim = c.head_dim;
  s.rope_dim = c.qk_rope_head_dim;
  s.nope_dim = c.head_dim - c.qk_rope_head_dim;
  s.q_lora = c.q_lora_rank;
  s.groups = c.o_groups;
  s.o_lora = c.o_lora_rank;
  s.window = c.sliding_window;
  s.index_heads = c.index_n_heads;
  s.index_dim = c.index_head_dim;
  s.index_topk = c.index_topk;
  s.experts = c.n_routed_experts;
  s.topk = c.num_experts_per_tok;
  s.inter = c.moe_intermediate_size;
  s.shared_inter = c.moe_intermediate_size * c.n_shared_experts;
  s.n_layers = c.num_hidden_layers;
  s.eps = static_cast<float>(c.rms_norm_eps);
  s.hc_eps = static_cast<float>(c.hc_eps);
  s.route_scale = static_cast<float>(c.routed_scaling_factor);
  s.swiglu_limit = static_cast<float>(c.swiglu_limit);
  s.sinkhorn_iters = c.hc_sinkhorn_iters;
  s.max_draft = max_draft;
  DSINFER_CHECK(s.topk >= 1 && s.topk <= 64 && s.topk <= s.experts, src, ": num_experts_per_tok ", s.topk,
                " must be in [1, min(64, n_routed_experts)]");
  DSINFER_CHECK(s.heads % s.groups == 0, src, ": num_attention_heads ", s.heads, " not divisible by o_groups ",
                s.groups);
  DSINFER_CHECK(s.rope_dim % 2 == 0 && s.rope_dim <= s.head_dim, src, ": bad qk_rope_head_dim ", s.rope_dim);
  DSINFER_CHECK(s.index_dim >= s.rope_dim, src, ": index_head_dim ", s.index_dim, " smaller than the rope dims");
  DSINFER_CHECK(s.hc >= 1 && s.hc <= 16 && s.sinkhorn_iters >= 1, src,
                ": hc_mult must be in [1, 16] and hc_sinkhorn_iters >= 1");

  s.has_mtp = c.n_mtp_layers > 0;
  DSINFER_CHECK(c.n_mtp_layers <= 1, src, ": ", c.n_mtp_layers, " MTP stages; only one MTP block is supported");
  int64_t block = 128;
  for (int64_t l = 0; l < s.n_layers + (s.has_mtp ? 1 : 0); ++l) {
    LayerShape ls;
    ls.id = l;
    ls.ratio = c.compress_ratio(l);
    ls.hash = l < s.n_layers && c.is_hash_layer(l);
    ls.rope = ls.ratio ? kRopeCompressed : kRopePlain;
    ls.prefix = c.layer_prefix(l);
    if (l >= s.n_layers) {
      DSINFER_CHECK(ls.ratio == 0, src, ": the MTP block must be window-only, compress_ratios[", l, "] = ", ls.ratio);
    }
    if (ls.ratio) {
      DSINFER_CHECK(ls.ratio > 0, src, ": negative compress ratio in layer ", l);
      DSINFER_CHECK(s.window >= ls.ratio, src, ": sliding_window ", s.window, " smaller than the compress ratio ",
                    ls.ratio, " of layer ", l, " (coverage gap, §2.8)");
      block = std::lcm(block, ls.ratio);
    }
    s.layers.push_back(ls);
  }
  s.block_tokens = block;

  kernels::RopeSpec plain{s.rope_dim, c.rope_theta, false, 1.0, 0, 32, 1};
  kernels::RopeSpec compressed{s.rope_dim, c.compress_rope_theta, false, 1.0, 0, 32, 1};
  if (c.rope_scaling) {
    compressed.yarn = true;
    compressed.factor = c.rope_scaling->factor;
    compressed.original_seq_len = c.rope_scaling->original_max_position_embeddings;
    compressed.beta_fast = c.rope_scaling->beta_fast;
    compressed.beta_slow = c.rope_scaling->beta_slow;
  }
  s.rope_freqs[kRopePlain] = kernels::rope_frequencies(plain);
  s.rope_freqs[kRopeCompressed] = kernels::rope_frequencies(compressed);

  s.kv = KvCodec(s.head_dim, s.rope_dim, numerics.kv_qdq, numerics.reference(), kKvFp8Block);
  s.bf16_logits = numerics.fast() && kernels::bf16dot_hardware() && s.kv.packed_bf16_dims() > 0 &&
                  s.kv.packed_bf16_dims() % kernels::kSinkBf16LogitsAlign == 0;
  s.key = IndexKeyCodec(s.index_dim, numerics.kv_qdq, kIndexKeyFp4Block);
  std::vector<int64_t> ratios;
  for (int64_t l = 0; l < s.n_layers; ++l) ratios.push_back(s.layers[l].ratio);
  s.blocks = std::make_shared<BlockLayout>(s.block_tokens, ratios, s.kv, s.key);
  for (auto& ls : s.layers) ls.part = ls.id < s.n_layers ? s.blocks->part_of_layer(ls.id) : -1;
  return s;
}

}  // namespace dsinfer::model::deepseek_v4
