// The shared MoE router scoring against its definition (model-v4.md §2.11, model-v41.md §2.11) in both
// scalars and with both models' variants (V4: no temperature, always renormalised without epsilon;
// V4.1: gate_temp, renormalised with norm_topk_prob and k > 1 over the sum + 1e-20).
#include "model/layers/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dsinfer::model::layers {
namespace {

TEST(LayersRouter, SqrtSoftplusMatchesDefinition) {
  for (double x : {-50.0, -5.0, -0.3, 0.0, 0.7, 3.0, 19.0, 25.0, 80.0}) {
    const double ref = std::sqrt(std::log1p(std::exp(x)));
    EXPECT_NEAR(sqrt_softplus(static_cast<float>(x)), ref, 1e-6 * std::max(1.0, ref)) << x;
    EXPECT_NEAR(sqrt_softplus(x), ref, 1e-14 * std::max(1.0, ref)) << x;
  }
}

TEST(LayersRouter, ScoresAndWeightsFollowEachVariant) {
  const std::vector<double> logits = {-2.5, 0.3, 1.7, -0.1, 4.0, 0.9};
  const int64_t E = static_cast<int64_t>(logits.size());
  const std::vector<int64_t> chosen = {4, 2, 5};
  struct Case {
    RouterSpec spec;
    const char* what;
  };
  const Case cases[] = {{{1.0, true, 0.0, 1.5}, "V4"},
                        {{1.7, true, 1e-20, 2.5}, "V4.1 norm_topk_prob"},
                        {{0.6, false, 1e-20, 2.0}, "V4.1 without renormalisation"}};
  for (const Case& c : cases) {
    std::vector<double> s = logits;
    router_scores(s.data(), E, c.spec);
    std::vector<double> score(E);
    for (int64_t e = 0; e < E; ++e) {
      const double l = logits[e] / c.spec.gate_temp;
      score[e] = std::sqrt(std::max(l, 0.0) + std::log1p(std::exp(-std::fabs(l))));
      EXPECT_EQ(s[e], score[e]) << c.what << " " << e;
    }
    std::vector<double> w(chosen.size());
    route_weights(s.data(), chosen.data(), static_cast<int64_t>(chosen.size()), c.spec, w.data());
    double sum = 0;
    for (int64_t e : chosen) sum += score[e];
    for (size_t k = 0; k < chosen.size(); ++k) {
      const double want = c.spec.normalize ? score[chosen[k]] / (sum + c.spec.sum_eps) * c.spec.route_scale
                                           : score[chosen[k]] * c.spec.route_scale;
      EXPECT_EQ(w[k], want) << c.what << " " << k;
    }
  }
  // float (V4's glue): the same within float rounding, and its weights sum to route_scale.
  std::vector<float> sf(logits.begin(), logits.end());
  const RouterSpec v4{1.0, true, 0.0, 1.5};
  router_scores(sf.data(), E, v4);
  const std::vector<int32_t> ch = {4, 2, 5};
  std::vector<float> wf(3);
  route_weights(sf.data(), ch.data(), 3, v4, wf.data());
  EXPECT_NEAR(wf[0] + wf[1] + wf[2], 1.5, 1e-6);
  std::vector<double> sd = logits;
  router_scores(sd.data(), E, v4);
  for (int64_t e = 0; e < E; ++e) EXPECT_NEAR(sf[e], sd[e], 1e-6 * std::max(1.0, sd[e])) << e;
}

}  // namespace
}  // namespace dsinfer::model::layers
