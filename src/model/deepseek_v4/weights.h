// The weights of a DeepSeek-V4 checkpoint as the forward pass uses them: products as kernels::Linear
// (FP8 / FP4 / BF16 / F32, decoded exactly), small parameters (norms, mHC, sinks, ape, router bias)
// converted to fp32 vectors, the hash-routing table to int32. Products keep pointing into the
// checkpoint's mapped files, which the model keeps open.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/cpu/linear.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/shape.h"

namespace dsinfer::model::deepseek_v4 {

// A kernels::Linear held by pointer. (Linear's inline default constructor needs its private Packed
// type to be complete, so structs holding Linear by value cannot be default-constructed outside
// kernels/; this keeps the weight structs plain.)
class Product {
 public:
  Product() = default;
  explicit Product(const kernels::WeightView& v) : l_(std::make_unique<kernels::Linear>(v)) {}
  const kernels::Linear& linear() const { return *l_; }
  int64_t rows() const { return l_->rows(); }
  int64_t cols() const { return l_->cols(); }
  void forward(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, core::ThreadPool* pool) const {
    l_->forward(x, M, ldx, y, ldy, pool);
  }
  void forward_rows(const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy, int64_t b, int64_t e) const {
    l_->forward_rows(x, M, ldx, y, ldy, b, e);
  }

 private:
  std::unique_ptr<kernels::Linear> l_;
};

struct HcWeights {  // one mHC mixing site: hc_*_fn [mixes, hc·d] (F32), base [mixes], scale [3] or [1]
  Product fn;
  std::vector<float> base, scale;
};

struct CompressorWeights {
  Product wkv, wgate;  // [c·D, d] BF16, evaluated in fp32
  std::vector<float> ape;      // [ratio][c·D]
  std::vector<float> norm;     // [D]
  int64_t ratio = 0, width = 0;
  bool overlap = false;
};

struct IndexerWeights {
  Product wq_b;          // [Hi·Di, q_lora]
  Product weights_proj;  // [Hi, d] BF16
  CompressorWeights compressor;
};

struct AttentionWeights {
  Product wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, sink;
  std::optional<CompressorWeights> compressor;
  std::optional<IndexerWeights> indexer;
};

struct ExpertWeights {
  Product w1, w2, w3;
};

struct MoeWeights {
  Product gate;           // [E, d] BF16, fp32 scores
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
  Product e_proj, h_proj;
  std::vector<float> enorm, hnorm, norm;
  HcWeights head;
};

struct ModelWeights {
  const uint16_t* embed = nullptr;  // [vocab][d] bf16, in the mapped checkpoint
  Product head;             // [vocab, d] BF16, fp32 logits
  std::vector<float> norm;
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
  std::optional<MtpWeights> mtp;

  // Reads every tensor the shape needs; `on_layer(done, total)` after each block.
  static ModelWeights load(const Checkpoint& ckpt, const ModelShape& shape,
                           const std::function<void(int64_t, int64_t)>& on_layer = nullptr);
};

}  // namespace dsinfer::model::deepseek_v4
