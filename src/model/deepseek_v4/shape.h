// Everything about a DeepSeek-V4 model that is fixed once the config and the numerics are known: sizes,
// the role of every layer, RoPE tables, cache formats and the compressed-block layout.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/deepseek_v4/compressed_block.h"
#include "model/deepseek_v4/kv_codec.h"
#include "model/deepseek_v4/numerics.h"

namespace dsinfer::model::deepseek_v4 {

enum RopeKind : int { kRopePlain = 0, kRopeCompressed = 1 };

struct LayerShape {
  int64_t id = 0;        // layer id; the MTP block is num_hidden_layers
  int64_t ratio = 0;     // 0: window only; 4: CSA (overlap compressor + indexer); other: HCA
  bool hash = false;     // MoE routed by the tid2eid table
  int rope = kRopePlain; // RoPE table of everything in the layer (§2.4.1)
  int part = -1;         // BlockLayout part of its compressed state, -1 if none
  std::string prefix;    // tensor-name prefix ("layers.3." / "mtp.0.")
  bool csa() const { return ratio == 4; }
  bool compressed() const { return ratio != 0; }
};

struct ModelShape {
  ModelConfig config;
  Numerics numerics;

  int64_t vocab = 0, dim = 0, hc = 0, heads = 0, head_dim = 0, rope_dim = 0, nope_dim = 0;
  int64_t q_lora = 0, groups = 0, o_lora = 0, window = 0;
  int64_t index_heads = 0, index_dim = 0, index_topk = 0;
  int64_t experts = 0, topk = 0, inter = 0, shared_inter = 0;
  int64_t n_layers = 0;  // backbone blocks
  bool has_mtp = false;
  float eps = 1e-6f, hc_eps = 1e-6f, route_scale = 1.0f, swiglu_limit = 0.0f;
  int64_t sinkhorn_iters = 0;
  int64_t max_draft = 7;     // extra window slots kept for rollback of multi-token steps
  int64_t block_tokens = 128;

  std::vector<LayerShape> layers;  // backbone layers, then the MTP block if any
  std::vector<float> rope_freqs[2];
  KvCodec kv;
  // Fast numerics on AVX-512 BF16: the attention logits' FP8 dims on bf16 dots (kernels::SinkAttention).
  bool bf16_logits = false;
  IndexKeyCodec key;
  std::shared_ptr<const BlockLayout> blocks;

  // Fails with a clear message for configs this engine does not implement.
  static ModelShape build(const ModelConfig& config, const Numerics& numerics, int64_t max_draft);

  const LayerShape& mtp_layer() const { return layers.back(); }
  int64_t hc_dim() const { return hc * dim; }
  int64_t mixes() const { return (2 + hc) * hc; }
};

}  // namespace dsinfer::model::deepseek_v4
