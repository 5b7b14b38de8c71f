// Sequence::stored_kv (what `dsinfer logits --dump-kv` writes for the teacher-forced golden test): one
// entry per layer / kv source with a row per position / entry, the QDQ'd grids of model-v41.md §2.10,
// and the same values however the sequence was fed (chunks, rollback).
#include <gtest/gtest.h>

#include <cmath>

#include "small_v41.h"
#include "model/deepseek_v41/prefill.h"
#include "model/mkmodel.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::TempDir;
using testing::small_v41_checkpoint;
using testing::v41_prompt;

// Whether v is s times a value with `mbits` mantissa bits and magnitude <= qmax (s a power of two, so
// exact in float): FP8 E4M3 (3, 448) or FP4 E2M1 (1, 6), normal range.
bool on_grid(double v, double s, int mbits, double qmax) {
  const double q = std::fabs(v / s);
  if (q == 0) return true;
  if (q > qmax) return false;
  int e = 0;
  const double m = std::frexp(q, &e);  // q = m 2^e, m in [0.5, 1)
  const double scaled = std::ldexp(m, mbits + 1);
  return scaled == std::floor(scaled);
}

// Every block of `block` values: all on the grid of the power-of-two scale 2^ceil(log2(amax / qmax)).
int64_t off_pow2_grid(const std::vector<float>& v, int64_t block, int mbits, double qmax) {
  int64_t off = 0;
  for (size_t b = 0; b + block <= v.size(); b += block) {
    double amax = 0;
    for (int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(static_cast<double>(v[b + j])));
    if (amax == 0) continue;
    const double s = std::ldexp(1.0, static_cast<int>(std::ceil(std::log2(amax / qmax))));
    for (int64_t j = 0; j < block; ++j) off += on_grid(v[b + j], s, mbits, qmax) ? 0 : 1;
  }
  return off;
}

// Feeds `ids` in chunks of 7, each followed by three junk tokens that are rolled back.
void feed_in_sevens_with_rollbacks(Sequence& seq, const std::vector<int32_t>& ids) {
  for (size_t b = 0; b < ids.size(); b += 7) {
    seq.forward(std::vector<int32_t>(ids.begin() + b, ids.begin() + std::min(ids.size(), b + 7)));
    const int64_t len = seq.length();
    seq.forward({5, 6, 7});
    seq.truncate(len);
  }
}

TEST(StoredKvV41, ShapesAndQdqGrids) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 5);
  const ModelConfig& c = ck->config();
  const EngramTokenMap map = load_engram_token_map(ck->dir(), c);
  const int64_t T = 40;
  Sequence seq(*ck, &map);
  seq.forward(v41_prompt(T));
  const StoredKv kv = seq.stored_kv();
  ASSERT_EQ(static_cast<int64_t>(kv.window.size()), c.num_hidden_layers);
  int64_t sources = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    ASSERT_EQ(static_cast<int64_t>(kv.window.at(l).size()), T * c.head_dim) << l;
    // Window KV: FP8 E4M3 over all dims in blocks of 32 (power-of-two scales).
    EXPECT_EQ(off_pow2_grid(kv.window.at(l), 32, 3, 448), 0) << "layer " << l;
    const LayerRoles& r = c.layer_roles(l);
    if (!r.owns_compressor) continue;
    ++sources;
    const int64_t G = T / r.ratio;
    ASSERT_EQ(static_cast<int64_t>(kv.compressed.at(l).size()), G * c.head_dim) << l;
    ASSERT_EQ(static_cast<int64_t>(kv.index_keys.at(l).size()), G * c.index_head_dim) << l;
    // Index keys: FP4 E2M1 in blocks of 32 (power-of-two scales).
    EXPECT_EQ(off_pow2_grid(kv.index_keys.at(l), 32, 1, 6), 0) << "layer " << l;
  }
  EXPECT_EQ(static_cast<int64_t>(kv.compressed.size()), sources);
  EXPECT_GT(sources, 0);

  // QDQ off: the window rows are not on that grid.
  PrefillOptions off;
  off.qdq = false;
  Sequence plain(*ck, &map, off);
  plain.forward(v41_prompt(T));
  EXPECT_GT(off_pow2_grid(plain.stored_kv().window.at(0), 32, 3, 448), 0);
}

TEST(StoredKvV41, ChunksAndRollbackStoreTheOnePassValues) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 5);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(33);
  Sequence one(*ck, &map);
  one.forward(ids);
  Sequence chunked(*ck, &map);
  feed_in_sevens_with_rollbacks(chunked, ids);
  const StoredKv a = one.stored_kv();
  const StoredKv b = chunked.stored_kv();
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.compressed, b.compressed);
  EXPECT_EQ(a.index_keys, b.index_keys);
}

// The DSpark draft head's stored values (§2.12, `--dump-kv` with `--mtp`: PREFIX.ring<s>.npy and
// PREFIX.block<s>.npy): after the teacher-forced draft head, per stage a [T, head_dim] ring and a
// [(T-1)·block, head_dim] block KV on the FP8 grid of the window KV (QDQ on), the same bits however
// the sequence was fed; refused before the draft head built them.
TEST(StoredKvV41, DsparkRingsAndBlockKvAfterTheDraftHead) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 5);
  const ModelConfig& c = ck->config();
  const EngramTokenMap map = load_engram_token_map(ck->dir(), c);
  const std::vector<int32_t> ids = v41_prompt(33);
  const int64_t B = c.dspark->block_size;
  Sequence one(*ck, &map);
  one.forward(ids);
  const std::string msg = testing::error_of([&] { one.dspark_stored_kv(); });
  EXPECT_NE(msg.find("after the teacher-forced draft head"), std::string::npos) << msg;
  one.dspark_draft0();
  const DsparkKv dk = one.dspark_stored_kv();
  ASSERT_EQ(static_cast<int64_t>(dk.rings.size()), c.n_mtp_layers);
  ASSERT_EQ(static_cast<int64_t>(dk.block_kv.size()), c.n_mtp_layers);
  ASSERT_GT(dk.rings.size(), 1u);
  for (size_t s = 0; s < dk.rings.size(); ++s) {
    ASSERT_EQ(static_cast<int64_t>(dk.rings[s].size()), 33 * c.head_dim) << s;
    ASSERT_EQ(static_cast<int64_t>(dk.block_kv[s].size()), 32 * B * c.head_dim) << s;
    EXPECT_EQ(off_pow2_grid(dk.rings[s], 32, 3, 448), 0) << "stage " << s;
    EXPECT_EQ(off_pow2_grid(dk.block_kv[s], 32, 3, 448), 0) << "stage " << s;
  }
  EXPECT_NE(dk.rings[0], dk.rings[1]);  // each stage its own wkv / kv_norm
  EXPECT_NE(dk.block_kv[1], dk.block_kv[2]);

  Sequence chunked(*ck, &map);
  feed_in_sevens_with_rollbacks(chunked, ids);
  chunked.dspark_draft0();
  const DsparkKv dc = chunked.dspark_stored_kv();
  EXPECT_EQ(dc.rings, dk.rings);
  EXPECT_EQ(dc.block_kv, dk.block_kv);

  PrefillOptions off;
  off.qdq = false;
  Sequence plain(*ck, &map, off);
  plain.forward(ids);
  plain.dspark_draft0();
  EXPECT_GT(off_pow2_grid(plain.dspark_stored_kv().rings.at(0), 32, 3, 448), 0);
  EXPECT_GT(off_pow2_grid(plain.dspark_stored_kv().block_kv.at(0), 32, 3, 448), 0);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
