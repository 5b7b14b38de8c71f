// Properties of the V4.1 one-pass prefill that hold whatever the weights (its numbers are checked
// against reference/model_v41.py by the golden tests): causality (a prefix alone gives the prefix's
// rows, main logits and DSpark draft 0), chunks / decode / rollback giving the one-pass rows, the QDQ
// switch acting, a clear error without a token map.
#include "model/deepseek_v41/prefill.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "small_v41.h"
#include "model/mkmodel.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::TempDir;
using testing::small_v41_checkpoint;
using testing::v41_prompt;

double max_abs(const std::vector<float>& v, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(v[i])));
  return m;
}

TEST(PrefillV41, APrefixAloneGivesThePrefixRows) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  // 40 tokens: window 8 wraps, 20 ratio-2 entries (top-4 prunes), candidate budget 4 x 2 exceeded.
  const std::vector<int32_t> ids = v41_prompt(40);
  std::vector<float> draft_full, draft_part;
  const std::vector<float> full = prefill_logits(*ck, &map, ids, {}, &draft_full);
  const std::vector<int32_t> head(ids.begin(), ids.begin() + 23);
  const std::vector<float> part = prefill_logits(*ck, &map, head, {}, &draft_part);
  const int64_t V = ck->config().vocab_size;
  ASSERT_EQ(full.size(), static_cast<size_t>(40 * V));
  ASSERT_EQ(part.size(), static_cast<size_t>(23 * V));
  ASSERT_EQ(draft_full.size(), static_cast<size_t>(39 * V));
  ASSERT_EQ(draft_part.size(), static_cast<size_t>(22 * V));
  const double scale = max_abs(full, full.size());
  EXPECT_GT(scale, 0.1);
  for (size_t i = 0; i < part.size(); ++i) ASSERT_NEAR(part[i], full[i], 1e-6 * scale) << "element " << i;
  // The prefix's draft rounds 0..21 (anchors up to token 22) use only positions <= 22.
  for (size_t i = 0; i < draft_part.size(); ++i) ASSERT_NEAR(draft_part[i], draft_full[i], 1e-6 * scale) << i;
  for (float x : full) ASSERT_TRUE(std::isfinite(x));
}

// Chunked prefill, token-by-token decode and rollback continue the state of §3.1; the kernels are
// batch invariant (a row's result never depends on the other rows of a product), so every chunking
// gives the one-pass logits bit for bit, QDQ on.
TEST(PrefillV41, ChunksDecodeAndRollbackGiveTheOnePassRows) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(40);
  std::vector<float> draft_full;
  const std::vector<float> full = prefill_logits(*ck, &map, ids, {}, &draft_full);
  for (const int chunk : {1, 5, 16}) {
    for (const int rollback : {0, 3}) {
      Sequence seq(*ck, &map);
      std::vector<float> got;
      for (size_t b = 0; b < ids.size(); b += chunk) {
        const std::vector<int32_t> part(ids.begin() + b, ids.begin() + std::min(ids.size(), b + chunk));
        const std::vector<float> out = seq.forward(part);
        got.insert(got.end(), out.begin(), out.end());
        if (rollback > 0) {
          const int64_t len = seq.length();
          seq.forward(std::vector<int32_t>(rollback, static_cast<int32_t>(b % 500 + 7)));
          seq.truncate(len);
          ASSERT_EQ(seq.length(), len);
        }
      }
      ASSERT_EQ(got.size(), full.size());
      for (size_t i = 0; i < full.size(); ++i) {
        ASSERT_EQ(got[i], full[i]) << "chunk " << chunk << " rollback " << rollback << " element " << i;
      }
      const std::vector<float> draft = seq.dspark_draft0();  // from the taps the chunks kept
      ASSERT_EQ(draft.size(), draft_full.size());
      for (size_t i = 0; i < draft.size(); ++i) {
        ASSERT_EQ(draft[i], draft_full[i]) << "draft 0, chunk " << chunk << " rollback " << rollback << " element " << i;
      }
    }
  }
}

// The confidence head (§2.12): a live draft round after prefix p gives its drafts and c_0 .. c_{B-1}
// bitwise as the teacher-forced rounds' row p (the same row-wise products; the round sees the last W
// ring entries only, which is all the teacher-forced round p attends to). The values themselves are
// checked against reference/model_v41.py by golden_tiny41_s1_onepass_dspark.
TEST(PrefillV41, DsparkRoundConfidenceIsTheTeacherForcedRow) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(20);
  const int64_t B = ck->config().dspark->block_size, V = ck->config().vocab_size;
  Sequence full(*ck, &map);
  full.forward(ids);
  std::vector<float> conf;
  const std::vector<float> draft0 = full.dspark_draft0(&conf);
  ASSERT_EQ(conf.size(), static_cast<size_t>(19 * B));
  for (const int p : {0, 8, 13, 18}) {
    Sequence seq(*ck, &map);
    seq.forward(std::vector<int32_t>(ids.begin(), ids.begin() + p + 1));
    std::vector<float> c;
    const std::vector<int32_t> drafts = seq.dspark_round(ids[p + 1], B, &c);
    ASSERT_EQ(c.size(), static_cast<size_t>(B));
    for (int64_t k = 0; k < B; ++k) EXPECT_EQ(c[k], conf[p * B + k]) << "round " << p << " draft " << k;
    const float* row = draft0.data() + p * V;
    EXPECT_EQ(drafts[0], std::max_element(row, row + V) - row) << "round " << p;
    // Fewer drafts: the same leading confidences.
    std::vector<float> c2;
    seq.dspark_round(ids[p + 1], 2, &c2);
    ASSERT_EQ(c2.size(), 2u);
    EXPECT_EQ(c2[0], c[0]);
    EXPECT_EQ(c2[1], c[1]);
  }
  // The values vary with the draft (not a constant head) and are finite.
  EXPECT_NE(conf[0], conf[1]);
  for (float x : conf) ASSERT_TRUE(std::isfinite(x));
}

// dspark_round keeps its head logits and Markov bias buffers across rounds (the engine drafts every
// sequence's round on one thread): rounds of different sequences and draft counts, interleaved, each
// give bitwise their own prefix's teacher-forced confidences (c_k follows the argmax of row k-1, so a
// row left from another round would change it) and greedy first draft.
TEST(PrefillV41, DsparkRoundsReuseBuffersWithoutLeakingAnotherRound) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(20);
  const int64_t B = ck->config().dspark->block_size, V = ck->config().vocab_size;
  Sequence full(*ck, &map);
  full.forward(ids);
  std::vector<float> conf;
  const std::vector<float> draft0 = full.dspark_draft0(&conf);
  Sequence a(*ck, &map), b(*ck, &map);
  a.forward(std::vector<int32_t>(ids.begin(), ids.begin() + 9));   // the round after p = 8
  b.forward(std::vector<int32_t>(ids.begin(), ids.begin() + 14));  // p = 13
  struct Round {
    Sequence* seq;
    int p;
    int64_t count;
  };
  for (const Round& r : {Round{&a, 8, B}, Round{&b, 13, 1}, Round{&a, 8, 3}, Round{&b, 13, B}, Round{&a, 8, 1}}) {
    std::vector<float> c;
    const std::vector<int32_t> drafts = r.seq->dspark_round(ids[r.p + 1], r.count, &c);
    ASSERT_EQ(drafts.size(), static_cast<size_t>(r.count));
    ASSERT_EQ(c.size(), static_cast<size_t>(r.count));
    for (int64_t k = 0; k < r.count; ++k) EXPECT_EQ(c[k], conf[r.p * B + k]) << "round " << r.p << " draft " << k;
    const float* row = draft0.data() + r.p * V;
    EXPECT_EQ(drafts[0], std::max_element(row, row + V) - row) << "round " << r.p << " count " << r.count;
  }
}

TEST(PrefillV41, DsparkDraftIsTheLastCall) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  Sequence seq(*ck, &map);
  seq.forward(v41_prompt(6));
  seq.dspark_draft0();
  const std::string msg = testing::error_of([&] { seq.forward(v41_prompt(3)); });
  EXPECT_NE(msg.find("after the DSpark draft head"), std::string::npos) << msg;
}

TEST(PrefillV41, QdqSwitchActs) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(24);
  PrefillOptions off;
  off.qdq = false;
  const std::vector<float> a = prefill_logits(*ck, &map, ids), b = prefill_logits(*ck, &map, ids, off);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_GT(diff, 1e-4);
}

TEST(PrefillV41, NeedsTheTokenMapForEngram) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const std::string msg = testing::error_of([&] { prefill_logits(*ck, nullptr, v41_prompt(4)); });
  EXPECT_NE(msg.find("token map"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
