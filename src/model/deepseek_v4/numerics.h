// Which arithmetic the forward pass reproduces (model-v4.md §2.10, §2.14).
//   kExact:     fp32 activations on exactly decoded weights; only the KV FP8 QDQ and the indexer FP4 QDQ
//               that belong to the model (QAT) are applied. The default, and what tight tests compare.
//   kReference: additionally the official code's FP8 activation quantization (block act_block) in front of
//               every FP8/FP4-weight product and its bf16 storage points. Comparable statistically only.
//   kFast:      serving numerics: the routed experts' FP4 products take activations quantized to int8
//               per block of act_block and run as exact integer dots (kernels/cpu/linear_int8.h); on a CPU
//               with AVX-512 BF16 the BF16 output head and every FP8 product (attention projections,
//               shared experts, MTP projections) take bf16-rounded activations (vdpbf16ps,
//               kernels/cpu/linear_bf16dot.h, linear_fp8bf16.h); everything else as kExact. Row-local,
//               so chunk and batch invariance hold as in kExact.
// kv_qdq = false switches the KV / indexer QDQ off (diagnostic; deep configs amplify tiny differences
// through the FP8/FP4 rounding, so tight cross-implementation checks turn it off on both sides).
#pragma once

#include <cstdint>
#include <string>

#include "core/dtypes.h"
#include "kernels/cpu/qdq.h"

namespace dsinfer::model::deepseek_v4 {

enum class NumericsMode : uint8_t { kExact, kReference, kFast };

struct Numerics {
  NumericsMode mode = NumericsMode::kExact;
  bool kv_qdq = true;
  // The activation block of the FP8 QDQ (kReference) and of the int8 quantization (kFast): the official
  // FP8 activation block (§2.10), the config's activation_block (128 in V4, 32 in V4.1), which
  // ModelShape::build sets.
  int64_t act_block = 128;

  bool reference() const { return mode == NumericsMode::kReference; }
  bool fast() const { return mode == NumericsMode::kFast; }

  // bf16 rounding where the official code stores bf16 (reference mode only).
  void bf16(float* x, int64_t n) const {
    if (!reference()) return;
    for (int64_t i = 0; i < n; ++i) x[i] = core::round_to_bf16(x[i]);
  }
  // FP8 activation QDQ in front of an FP8/FP4-weight product (reference mode only). n % act_block == 0.
  void act_quant(float* x, int64_t n) const {
    if (reference()) kernels::fp8_block_qdq(x, n, act_block);
  }
  std::string describe() const {
    return std::string(reference() ? "reference" : fast() ? "fast" : "exact") + (kv_qdq ? "" : " (KV/indexer QDQ off)");
  }
};

NumericsMode parse_numerics_mode(const std::string& name);  // "exact" | "reference" | "fast"

}  // namespace dsinfer::model::deepseek_v4
