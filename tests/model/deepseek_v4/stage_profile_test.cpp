// `dsinfer bench --breakdown`: the stage profile of the forward pass. Attaching it changes no result,
// it records one entry per forward, and its stages account for every parallel region of the step.
#include <gtest/gtest.h>

#include <chrono>

#include "test_models.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

TEST(V4StageProfile, RecordsEveryStepAndRegionWithoutChangingTheLogits) {
  const std::string dir = testing::make_test_model("tiny512", testing::tiny_config());
  const std::vector<int32_t> tokens = testing::random_tokens(24, 512, 11);
  ModelOptions opt;
  opt.threads = 2;
  opt.numerics.mode = NumericsMode::kFast;
  auto plain = Model::load(dir, opt);
  auto profiled = Model::load(dir, opt);
  StageProfile profile;
  profiled->set_stage_profile(&profile);
  profiled->pool().set_region_timing(true);

  // A prefill chunk, then one token per step.
  const std::vector<int64_t> chunks = {16, 1, 1, 1, 1, 1, 1, 1, 1};
  auto s1 = plain->new_sequence();
  const std::vector<float> want = testing::run_chunks(*plain, *s1, tokens, 0, 24, chunks);
  const uint64_t regions_before = profiled->pool().regions();
  auto s2 = profiled->new_sequence();
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> got = testing::run_chunks(*profiled, *s2, tokens, 0, 24, chunks);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(testing::first_difference(want, got), -1);

  ASSERT_EQ(profile.steps.size(), chunks.size());
  ASSERT_EQ(profile.serial.size(), chunks.size());
  uint64_t regions = 0;
  for (uint64_t r : profile.regions) regions += r;
  EXPECT_EQ(regions, profiled->pool().regions() - regions_before);
  EXPECT_GT(regions, 0u);
  double total = 0;
  for (size_t k = 0; k < profile.steps.size(); ++k) {
    for (int i = 0; i < static_cast<int>(Stage::kCount); ++i) {
      EXPECT_GE(profile.steps[k][i], 0.0);
      EXPECT_LE(profile.serial[k][i], profile.steps[k][i]);
      total += profile.steps[k][i];
    }
    // Every step runs the layers' products and the head.
    EXPECT_GT(profile.steps[k][static_cast<int>(Stage::kAttnProducts)], 0.0);
    EXPECT_GT(profile.steps[k][static_cast<int>(Stage::kFfn)], 0.0);
    EXPECT_GT(profile.steps[k][static_cast<int>(Stage::kHead)], 0.0);
  }
  EXPECT_LE(total, wall);

  // Detached, nothing more is recorded.
  profiled->set_stage_profile(nullptr);
  auto s3 = profiled->new_sequence();
  testing::run_chunks(*profiled, *s3, tokens, 0, 4, {4});
  EXPECT_EQ(profile.steps.size(), chunks.size());
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
