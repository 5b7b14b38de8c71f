// The MoE expert stage shared by V4 and V4.1 (model-v4.md §2.11, model-v41.md §2.11): given each row's
// chosen experts and route weights,
//   y[row] = Σ_{k, in ascending expert id (equal ids by slot)} w2_e(SwiGLU(w1_e x, w3_e x) · route[row][k])
//            + w2_s(SwiGLU(w1_s x, w3_s x))                                   (s: the shared expert)
// summed in fp32 in that fixed order. The (row, slot) pairs are grouped by expert so that all rows routed
// to one expert form one product; the w1/w3 of every active expert and of the shared expert run in one
// parallel region, each product on one thread, then the w2 products in a second. Every kernel used is
// row-local, so a row's result depends neither on the other rows, nor on the thread count, nor on how
// the products are spread (batch invariance).
// An expert runs its int8 products (--numerics fast: activations quantized per act_block columns, once
// per routed row for all its experts) when it has them, else its exact kernels::Linear products.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/linear_int8.h"

namespace dsinfer::model::layers {

// One expert's three products, not owned: the int8 ones when w1_int8 is set (then all three), else the
// exact ones.
struct ExpertProducts {
  const kernels::Linear* w1 = nullptr;
  const kernels::Linear* w2 = nullptr;
  const kernels::Linear* w3 = nullptr;
  const kernels::Fp4Int8Linear* w1_int8 = nullptr;
  const kernels::Fp4Int8Linear* w2_int8 = nullptr;
  const kernels::Fp4Int8Linear* w3_int8 = nullptr;
  bool int8() const { return w1_int8 != nullptr; }
};

// Roundings a numerics mode puts around the products (an empty function: none). V4's reference numerics
// round to bf16 where the official code stores bf16 and FP8-QDQ every FP4/FP8 product's input; V4.1's
// official_at_fast_sites QDQs only the routed experts' inputs.
struct ExpertRounding {
  // In place on n values (whole rows): the g / u / h rows, each routed output and the shared output
  // before they are summed, and the sum.
  std::function<void(float*, int64_t)> bf16;
  // In place on whole rows: the rows going into w1/w3 and into w2.
  std::function<void(float*, int64_t)> act_quant;
  bool act_quant_shared = true;  // the shared expert's inputs too
};

struct ExpertStage {
  int64_t dim = 0;           // d: the rows' width and the output's
  int64_t inter = 0;         // the routed experts' hidden width
  int64_t shared_inter = 0;  // the shared expert's hidden width
  int64_t topk = 0;          // K: experts chosen per row
  float swiglu_limit = 0;    // clamp of the SwiGLU (0: none)
  int64_t act_block = 0;     // the int8 products' activation block (experts with int8 products only)
  ExpertRounding rounding;
};

// Buffers kept by the caller between calls, so a decode step allocates nothing; any contents.
struct ExpertScratch {
  std::vector<int32_t> start, pairs, grouped_of;
  std::vector<float> xq, xg, pair_weight, g, u, h, out;
  std::vector<int8_t> q_in, q_h;
  std::vector<float> s_in, s_h;
};

// x: [N][dim] rows; chosen, route: [N][topk] expert ids (each < experts.size()) and route weights;
// shared: the shared expert (its w1 must be set). Writes y: [N][dim] (may not alias x).
void experts_forward(const ExpertStage& stage, std::span<const ExpertProducts> experts, const ExpertProducts& shared,
                     const float* x, int64_t N, const int32_t* chosen, const float* route, float* y,
                     ExpertScratch& scratch, core::ThreadPool* pool);

}  // namespace dsinfer::model::layers
