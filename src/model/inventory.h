// The tensors a checkpoint of a given config must hold (model-v4.md §4.2, model-v41.md §4.2): names,
// dtypes, shapes. Used
// by the loader's missing/extra/shape check and by mkmodel, so the layout is written down once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtypes.h"
#include "model/config.h"

namespace dsinfer::model {

enum class TensorKind : uint8_t {
  kLinearWeight,  // the weight of a product y = W x (FP8 / FP4-packed / BF16), logical [rows, cols]
  kLinearScale,   // the E8M0 scale grid of the FP8/FP4 linear named by `linear`
  kEmbedding,     // embed.weight (and DSpark markov_w1, a token-indexed table)
  kNorm,          // RMSNorm weight
  kHcFn,          // mHC mixing projection [mix, hc*d]
  kHcBase,
  kHcScale,
  kAttnSink,
  kApe,           // compressor absolute position-in-group bias
  kGateBias,      // router selection bias
  kTid2Eid,       // hash routing table (I64 expert ids)
  // V4.1 Engram (model-v41.md §2.15): the FP8 table [rows, head_dim] with its per-row x 32-column E8M0
  // scales [rows, head_dim / 32] (the only FP8 tensor not on the weight-block grid), and the gate
  // weights q_weight / k_weight [hc_mult, d].
  kEngramTable,
  kEngramScale,
  kEngramGate,
};

struct TensorSpec {
  std::string name;
  core::DType dtype;
  std::vector<int64_t> shape;
  TensorKind kind;
  int64_t layer = -1;          // layer id (MTP stage K = num_hidden_layers + K); -1 for global tensors
  // For kLinearWeight / kLinearScale: the linear's name prefix ("layers.0.attn.wq_a"), storage and
  // logical shape.
  std::string linear;
  WeightStorage storage = WeightStorage::kBF16;
  int64_t rows = 0;
  int64_t cols = 0;
};

// In checkpoint order: global tensors, then layer 0.., then MTP/DSpark stages. Dispatches on
// config.arch; the V4.1 layout follows the layer roles (config.roles).
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// The tensor-name prefixes of all linears (what Checkpoint::linear accepts).
std::vector<std::string> linear_names(const ModelConfig& config);

}  // namespace dsinfer::model
