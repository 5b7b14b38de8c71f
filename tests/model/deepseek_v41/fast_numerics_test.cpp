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

#include "model/deepseek_v41/prefill.h"
#include "small_v41.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::small_v41_checkpoint;
using testing::TempDir;
using testing::v41_prompt;

struct Distance {
  double median_rel = 0;  // median over rows of ||a - b|| / ||b||
  double mean_kl = 0;     // mean over rows of KL(softmax(b) || softmax(a)), nats
  double top1 = 0;        // share of rows with the same argmax
};

Distance distance(const std::vector<float>& a, const std::vector<float>& b, int64_t V) {
  const int64_t rows = static_cast<int64_t>(b.size()) / V;
  std::vector<double> rel;
  Distance out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * V;
    const float* y = b.data() + r * V;
    double num = 0, den = 0, mx = -1e300, my = -1e300;
    for (int64_t v = 0; v < V; ++v) {
      num += std::pow(double(x[v]) - y[v], 2);
      den += double(y[v]) * y[v];
      mx = std::max(mx, double(x[v]));
      my = std::max(my, double(y[v]));
    }
    rel.push_back(std::sqrt(num / den));
    double zx = 0, zy = 0;
    for (int64_t v = 0; v < V; ++v) {
      zx += std::exp(x[v] - mx);
      zy += std::exp(y[v] - my);
    }
    double kl = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double py = std::exp(y[v] - my) / zy, lx = x[v] - mx - std::log(zx), ly = y[v] - my - std::log(zy);
      kl += py * (ly - lx);
    }
    out.mean_kl += kl / static_cast<double>(rows);
    out.top1 += (std::max_element(x, x + V) - x == std::max_element(y, y + V) - y) ? 1.0 / rows : 0.0;
  }
  std::nth_element(rel.begin(), rel.begin() + rel.size() / 2, rel.end());
  out.median_rel = rel[rel.size() / 2];
  return out;
}

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
  const Distance off = distance(official, plain, V), fst = distance(fast, plain, V);
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
