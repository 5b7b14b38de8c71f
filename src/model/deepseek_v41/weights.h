// The V4.1 forward's weights (private to model/deepseek_v41): each linear prepared once for the
// products it runs (the kernels as stored, double accumulation, or --numerics fast) and kept, shareable
// by the sequences of one checkpoint; the products themselves (matmul).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/linear_int8.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/numerics.h"

namespace dsinfer::model::deepseek_v41::detail {

// A linear weight prepared for products: for the kernels, or (double accumulation) as its exact fp32
// values [rows, cols]; with --numerics fast a routed FP4 expert as int8 products (activations quantized
// per act_block columns) and the BF16 head as bf16 dots (where the CPU has AVX-512 BF16).
struct Lin {
  kernels::Linear fast;
  kernels::Fp4Int8Linear int8;
  int64_t act_block = 0;
  kernels::Bf16DotLinear bf16;
  // PrefillOptions::official_at_fast_sites: the input FP8-QDQ'd per qdq_block columns, or bf16-rounded.
  int64_t qdq_block = 0;
  bool bf16_input = false;
  int64_t rows = 0, cols = 0;
  Vec dense;
  const float* row(int64_t r) const { return dense.data() + r * cols; }
};

class Weights {
 public:
  Weights(const Checkpoint& ck, bool double_accumulation, bool fast, bool official_at_fast_sites = false)
      : ck_(ck),
        double_(double_accumulation),
        fast_(fast && !double_accumulation),
        official_(official_at_fast_sites && !fast_ && !double_accumulation) {}

  // A linear weight as kernels::Linear takes it, as stored: BF16, F32, FP4 (1x32 scales, as in V4) and
  // FP8 with V4.1's 32x32 scale blocks (the view carries the block; the packed FP8 products take it).
  kernels::WeightView view(const std::string& prefix) const;

  // Prepared once per weight and kept: a sequence fed in chunks or token by token reuses them.
  const Lin& linear(const std::string& prefix) const { return prepared(prefix, 0, -1); }

  // Rows [begin, end) of a linear as a weight of its own (a group of a grouped projection), kept too.
  const Lin& linear_rows(const std::string& prefix, int64_t begin, int64_t end) const {
    return prepared(prefix, begin, end);
  }

  Vec vec(const std::string& name) const { return plain(ck_.get(name)); }

  // Rows of a BF16 table (embeddings).
  Vec rows(const std::string& name, const std::vector<int64_t>& ids) const;

  // Engram table rows: E4M3 value x E8M0 scale per row and 32 columns (§4.3), read row by row.
  void engram_row(const std::string& prefix, int64_t row, float* out) const;

 private:
  static float scale(const TensorView& s, int64_t i);
  static Vec plain(const TensorView& t);
  const Lin& prepared(const std::string& prefix, int64_t begin, int64_t end) const;

  // "....ffn.experts.N.wK" (not the shared experts, which stay exact as in V4's fast mode).
  static bool routed_expert(const std::string& prefix) { return prefix.find(".experts.") != std::string::npos; }

  const Checkpoint& ck_;
  bool double_;
  bool fast_;
  bool official_;
  mutable std::map<std::string, Lin> cache_;
};

// y[t * ldy + r] = x[t * ldx ..] . W[r]: the kernels' fp32 products, or double accumulation.
void matmul_into(core::ThreadPool& pool, const float* x, int64_t T, int64_t ldx, const Lin& w, float* y, int64_t ldy);

// Y [T, out] = X [T, in] W^T.
Vec matmul(core::ThreadPool& pool, const Vec& x, int64_t T, const Lin& w);

}  // namespace dsinfer::model::deepseek_v41::detail
