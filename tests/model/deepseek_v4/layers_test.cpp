// Properties of the small layer pieces against their definitions (model-v4.md §2.11; mHC: tests/model/layers).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/deepseek_v4/moe.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

TEST(V4Router, SqrtSoftplusMatchesDefinition) {
  for (double x : {-50.0, -5.0, -0.3, 0.0, 0.7, 3.0, 19.0, 25.0, 80.0}) {
    const double ref = std::sqrt(std::log1p(std::exp(x)));
    EXPECT_NEAR(sqrt_softplus(static_cast<float>(x)), ref, 1e-6 * std::max(1.0, ref)) << x;
  }
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
