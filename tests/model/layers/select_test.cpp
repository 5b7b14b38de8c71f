// The shared expert selection (model-v4.md §2.11, model-v41.md §2.11) against its definition: the K
// largest score + bias, equal values toward the lower index, kept by index (V4) or by rank (V4.1).
#include "model/layers/select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace dsinfer::model::layers {
namespace {

TEST(LayersSelect, BiasChoosesTiesGoLowAndEachModelKeepsItsOrder) {
  // biased = {0.5, 2.5, 1.0, 2.5, 3.0, -1.0, 1.0}: ranks 4, 1, 3 (tie: lower index first), 2, 6, 0, 5.
  const std::vector<double> score = {0.25, 2.0, 0.5, 1.5, 1.0, 0.0, 0.75};
  const std::vector<float> bias = {0.25f, 0.5f, 0.5f, 1.0f, 2.0f, -1.0f, 0.25f};
  const int64_t E = static_cast<int64_t>(score.size());
  std::vector<double> biased(E);
  std::vector<int64_t> by_rank(4);
  ASSERT_EQ(select_experts(score.data(), bias.data(), E, 4, SelectOrder::kByRank, biased.data(), by_rank.data()), 4);
  EXPECT_EQ(by_rank, (std::vector<int64_t>{4, 1, 3, 2}));
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(biased[e], score[e] + bias[e]) << e;

  const std::vector<float> scoref(score.begin(), score.end());
  std::vector<float> biasedf(E);
  std::vector<int32_t> by_index(4);
  ASSERT_EQ(select_experts(scoref.data(), bias.data(), E, 4, SelectOrder::kByIndex, biasedf.data(), by_index.data()),
            4);
  EXPECT_EQ(by_index, (std::vector<int32_t>{1, 2, 3, 4}));

  // K ≥ E takes every expert; a NaN ranks below every number.
  std::vector<double> nan_score = score;
  nan_score[4] = NAN;
  std::vector<int64_t> all(E + 2, -1);
  ASSERT_EQ(select_experts(nan_score.data(), bias.data(), E, E + 2, SelectOrder::kByRank, biased.data(), all.data()),
            E);
  EXPECT_EQ(std::vector<int64_t>(all.begin(), all.begin() + E), (std::vector<int64_t>{1, 3, 2, 6, 0, 5, 4}));
}

TEST(LayersSelect, MatchesAFullSortOnManyExperts) {
  // 64 experts, K 6, with repeated values: the choice equals the first K of a full sort by
  // (biased desc, index asc).
  const int64_t E = 64, K = 6;
  std::vector<float> score(E), bias(E, 0.0f);
  uint32_t seed = 3;
  for (int64_t e = 0; e < E; ++e) {
    seed = seed * 1664525u + 1013904223u;
    score[e] = static_cast<float>((seed >> 24) % 16) * 0.125f;  // 16 distinct values: many ties
    bias[e] = (e % 3 == 0) ? 0.125f : 0.0f;
  }
  std::vector<int32_t> order(E);
  for (int32_t e = 0; e < E; ++e) order[e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return score[a] + bias[a] > score[b] + bias[b]; });
  std::vector<float> biased(E);
  std::vector<int32_t> by_rank(K), by_index(K);
  select_experts(score.data(), bias.data(), E, K, SelectOrder::kByRank, biased.data(), by_rank.data());
  select_experts(score.data(), bias.data(), E, K, SelectOrder::kByIndex, biased.data(), by_index.data());
  const std::vector<int32_t> want(order.begin(), order.begin() + K);
  EXPECT_EQ(by_rank, want);
  std::vector<int32_t> want_sorted = want;
  std::sort(want_sorted.begin(), want_sorted.end());
  EXPECT_EQ(by_index, want_sorted);
}

}  // namespace
}  // namespace dsinfer::model::layers
