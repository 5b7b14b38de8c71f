// The weights of a DeepSeek-V4 checkpoint as the forward pass uses them: products as kernels::Linear
// (FP8 / FP4 / BF16 / F32, decoded exactly; Linear keeps its own repacked copy), small parameters
// (norms, mHC, sinks, ape, router bias) converted to fp32 vectors, the hash-routing table to int32. The
// embedding table is read in place from the checkpoint's mapped file, which the model keeps open; every
// other mapped page is released from memory once copied (Checkpoint::release), so the resident size
// is the repacked weights plus the embedding rows in use, never a weight twice.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_int8.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/shape.h"

namespace dsinfer::model::deepseek_v4 {

struct HcWeights {  // one mHC mixing site: hc_*_fn [mixes, hc·d] (F32), base [mixes], scale [3] or [1]
  kernels::Linear fn;
  std::vector<float> base, scale;
};

struct CompressorWeights {
  kernels::Linear wkv, wgate;  // [c·D, d] BF16, evaluated in fp32 (fast mode: bf16 dot products)
  std::vector<float> ape;      // [ratio][c·D]
  std::vector<float> norm;     // [D]
  int64_t ratio = 0, width = 0;
  bool overlap = false;
};

struct IndexerWeights {
  kernels::Linear wq_b;          // [Hi·Di, q_lora]
  kernels::Linear weights_proj;  // [Hi, d] BF16
  CompressorWeights compressor;
};

struct AttentionWeights {
  kernels::Linear wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, sink;
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct ExpertWeights {
  kernels::Linear w1, w2, w3;
  // --numerics fast, routed FP4 experts: the int8 products instead (w1..w3 then stay empty, so no
  // weight is held twice).
  kernels::Fp4Int8Linear w1_int8, w2_int8, w3_int8;
  bool int8() const { return !w1_int8.empty(); }
};

struct MoeWeights {
  kernels::Linear gate;           // [E, d] BF16, fp32 scores
  std::vector<float> bias;        // [E] (score-routed layers)
  std::vector<int32_t> tid2eid;   // [vocab][k] (hash layers)
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct BlockWeights {
  HcWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  BlockWeights block;
  kernels::Linear e_proj, h_proj;
  std::vector<float> enorm, hnorm, norm;
  HcWeights head;
};

struct ModelWeights {
  const uint16_t* embed = nullptr;  // [vocab][d] bf16, in the mapped checkpoint
  kernels::Linear head;             // [vocab, d] BF16, fp32 logits
  // --numerics fast on a CPU with AVX-512 BF16: the head as bf16 dot products instead (head then empty).
  kernels::Bf16DotLinear head_bf16;
  std::vector<float> norm;
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
  std::optional<MtpWeights> mtp;

  // Reads every tensor the shape needs; `on_layer(done, total)` after each block.
  static ModelWeights load(const Checkpoint& ckpt, const ModelShape& shape,
                           const std::function<void(int64_t, int64_t)>& on_layer = nullptr);
};

}  // namespace dsinfer::model::deepseek_v4
