// --numerics fast on V4.1 (PrefillOptions::fast): the routed experts' FP4 products on int8 activations
// (32-column blocks, the config's activation_block) and the head on bf16 dots, against the plain exact
// forward. V4.1 has no --numerics reference, so the bound is the official numerics (FP8 activation QDQ,
// bf16 storage, model-v4.md §2.10) applied at exactly the sites fast changes (official_at_fast_sites):
// the full official numerics quantize every FP8/FP4 product's input besides, so they are further off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "model/logit_distance.h"
#include "model/deepseek_v41/prefill.h"
#include "small_v41.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::small_v41_checkpoint;
using testing::TempDir;
using testing::v41_prompt;

TEST(V41FastNumerics, NoFurtherFromPlainThanTheOfficialNumericsAtItsSites) {
  TempDir dir;
  const auto ck = small_v41_checkpoint(dir, 5);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const int64_t V = ck->config().vocab_size;
  ASSERT_EQ(ck->config().activation_block, 32);
  const std::vector<int32_t> ids = v41_prompt(96);
  PrefillOptions fast_opt, official_opt;
  fast_opt.fast = true;
  official_opt.official_at_fast_sites = true;
  const std::vector<float> plain = prefill_logits(*ck, &map, ids);
  const std::vector<float> fast = prefill_logits(*ck, &map, ids, fast_opt);
  const std::vector<float> official = prefill_logits(*ck, &map, ids, official_opt);
  ASSERT_EQ(fast.size(), plain.size());
  ASSERT_EQ(official.size(), plain.size());
  ASSERT_NE(fast, plain) << "fast mode computed the plain numerics";
  ASSERT_NE(official, plain) << "the official numerics changed nothing";
  for (float v : fast) ASSERT_TRUE(std::isfinite(v));
  using model::testing::logit_distance;
  const model::testing::LogitDistance off = logit_distance(official, plain, V), fst = logit_distance(fast, plain, V);
  std::printf("small V4.1 vs plain fp32: official (at fast's sites) median rel %.3g, KL %.3g, top-1 %.3f; "
              "fast median rel %.3g, KL %.3g, top-1 %.3f\n",
              off.median_rel, off.mean_kl, off.top1, fst.median_rel, fst.mean_kl, fst.top1);
  // Factor 1: int8 steps of amax/127 per 32 columns against FP8 E4M3 (steps up to 2^-4 relative) in
  // front of the same products; the head's input bf16-rounded on both sides (fast: where the CPU has
  // AVX-512 BF16, else exact).
  EXPECT_LE(fst.median_rel, off.median_rel);
  EXPECT_LE(fst.mean_kl, off.mean_kl);
  EXPECT_GE(fst.top1, off.top1);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
