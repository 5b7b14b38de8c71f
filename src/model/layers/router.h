// MoE router scoring shared by V4 and V4.1 (model-v4.md §2.11, model-v41.md §2.11), the variants as
// data: V4.1 divides the gate logits by gate_temp and normalises the chosen scores only with
// norm_topk_prob and more than one expert, adding 1e-20 to their sum; V4 does neither (gate_temp 1,
// eps 0). The choice of experts is select.h (V4's hash layers stay in V4). T is the
// scalar of the model's glue (float in V4, double in V4.1).
#pragma once

#include <cstdint>

namespace dsinfer::model::layers {

struct RouterSpec {
  double gate_temp = 1.0;    // logits / gate_temp before the score
  bool normalize = true;     // chosen scores divided by their sum (+ sum_eps)
  double sum_eps = 0.0;
  double route_scale = 1.0;  // routed_scaling_factor
};

// sqrt(softplus(x)), computed as sqrt(max(x, 0) + log1p(exp(-|x|))) (no overflow for large |x|).
template <typename T>
T sqrt_softplus(T x);

// In place on the E gate logits of one row: score = sqrt_softplus(logit / gate_temp).
template <typename T>
void router_scores(T* s, int64_t E, const RouterSpec& spec);

// The route weights of the K chosen experts of one row from its scores:
//   w[k] = score[chosen[k]] / (Σ_k score[chosen[k]] + sum_eps) · route_scale   (normalize)
//   w[k] = score[chosen[k]] · route_scale                                       (otherwise)
// with the sum in k order.
template <typename T, typename Index>
void route_weights(const T* scores, const Index* chosen, int64_t K, const RouterSpec& spec, T* w);

}  // namespace dsinfer::model::layers
