// The compact storage of the V4.1 state (model-v41.md §3.1): the codecs decode to the QDQ values bit for
// bit, the bytes per position are the spec's compact sizes with the KV QDQ on (fp32 with it off), and
// a rollback into rows the recent fp32 copy no longer holds continues as the run that never rolled back.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/dtypes.h"
#include "core/error.h"
#include "kernels/cpu/qdq.h"
#include "model/deepseek_v41/kv_rows.h"
#include "model/deepseek_v41/numerics.h"
#include "model/deepseek_v41/prefill.h"
#include "small_v41.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::small_v41_checkpoint;
using testing::TempDir;
using testing::v41_prompt;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Rows as computed: random magnitudes over many binades, with zeros, negative zeros, subnormal-sized
// values and a row of zeros (a replay's padding).
std::vector<float> random_rows(int64_t n, int64_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-30, 12), pick(0, 9);
  std::vector<float> v(static_cast<size_t>(n * dim));
  for (int64_t r = 0; r < n; ++r) {
    const float row_scale = std::ldexp(1.0f, binade(rng));
    for (int64_t i = 0; i < dim; ++i) {
      float x = normal(rng) * row_scale;
      const int k = pick(rng);
      if (k == 0) x = 0.0f;
      if (k == 1) x = -0.0f;
      if (k == 2) x = std::ldexp(normal(rng), -140);
      if (r == 3) x = 0.0f;
      v[r * dim + i] = x;
    }
  }
  return v;
}

// qdq_fp4_e4m3_scale as the reference writes it (reference/model_v41.py), independent of the codec.
void reference_fp4_e4m3_qdq(float* v, int64_t n) {
  for (int64_t b = 0; b < n; b += 16) {
    float amax = 0;
    for (int64_t i = b; i < b + 16; ++i) amax = std::max(amax, std::fabs(v[i]));
    amax = std::max(amax, 6.0f * 0.001953125f);
    const float s = core::fp8_e4m3_to_float(core::float_to_fp8_e4m3(std::min(amax / 6.0f, 448.0f)));
    for (int64_t i = b; i < b + 16; ++i) {
      const double q = std::clamp(static_cast<double>(v[i]) / s, -6.0, 6.0);
      v[i] = core::fp4_e2m1_to_float(core::float_to_fp4_e2m1(static_cast<float>(q))) * s;
    }
  }
}

TEST(CompactStateV41, CompressedKvCodecIsTheQdq) {
  const int64_t dim = 128, n = 40;
  const std::vector<float> rows = random_rows(n, dim, 2);
  std::vector<float> want = rows;
  reference_fp4_e4m3_qdq(want.data(), n * dim);
  std::vector<uint8_t> packed(static_cast<size_t>(n * dim / 2)), scales(static_cast<size_t>(n * dim / 16));
  detail::fp4_e4m3_scale_encode(rows.data(), n * dim, packed.data(), scales.data());
  std::vector<float> got(rows.size());
  detail::fp4_e4m3_scale_decode(packed.data(), scales.data(), n * dim, got.data());
  EXPECT_TRUE(same_bits(got, want));
  std::vector<float> in_place = rows;
  detail::qdq_fp4_e4m3_scale(in_place.data(), n * dim);
  EXPECT_TRUE(same_bits(in_place, want));
  // Decoded values encode exactly again (a state range's), also where encode would not find them:
  // amax 9.6 * 2^-9 takes the scale 2^-8 (E4M3 subnormal 1.6 * 2^-9 rounded up), amax / s = 4.8 rounds
  // to 4, and 4 * 2^-8 / 6 rounds to the scale 2^-9, on which 4 * 2^-8 is not a code.
  std::vector<float> tiny(16, 0.0f);
  tiny[0] = 9.6f * 0.001953125f;
  tiny[1] = -0.0f;
  tiny[2] = -3.1f * 0.001953125f;
  reference_fp4_e4m3_qdq(tiny.data(), 16);
  ASSERT_EQ(tiny[0], 4.0f * 0.00390625f);
  uint8_t p16[8], s16;
  detail::fp4_e4m3_scale_encode(tiny.data(), 16, p16, &s16);
  std::vector<float> again(16);
  detail::fp4_e4m3_scale_decode(p16, &s16, 16, again.data());
  EXPECT_FALSE(same_bits(again, tiny)) << "encode is not the identity on decoded values";
  ASSERT_TRUE(detail::fp4_e4m3_scale_encode_exact(tiny.data(), 16, p16, &s16));
  detail::fp4_e4m3_scale_decode(p16, &s16, 16, again.data());
  EXPECT_TRUE(same_bits(again, tiny));
  ASSERT_TRUE(detail::fp4_e4m3_scale_encode_exact(want.data(), n * dim, packed.data(), scales.data()));
  detail::fp4_e4m3_scale_decode(packed.data(), scales.data(), n * dim, got.data());
  EXPECT_TRUE(same_bits(got, want));
  tiny[5] = 0.3f * tiny[0];  // off the grid
  EXPECT_FALSE(detail::fp4_e4m3_scale_encode_exact(tiny.data(), 16, p16, &s16));
}

TEST(CompactStateV41, WindowRowsDecodeToTheQdqValues) {
  const int64_t dim = 128, keep = 7, n = 50;
  const std::vector<float> rows = random_rows(n, dim, 1);
  std::vector<float> want = rows;
  for (int64_t r = 0; r < n; ++r) kernels::fp8_block_qdq(want.data() + r * dim, dim, detail::kKvQdqBlock);
  detail::KvRows w(dim, detail::RowCodec::kFp8E8m0, keep);
  for (int64_t b = 0; b < n; b += 9) w.append(rows.data() + b * dim, std::min<int64_t>(9, n - b));
  ASSERT_EQ(w.size(), n);
  EXPECT_TRUE(same_bits(w.decode(0, n), want));
  EXPECT_EQ(w.bytes(), n * (dim + dim / 32));  // FP8 codes + an E8M0 scale per 32
  // The recent rows attention reads, also after a rollback behind the recent copy.
  auto recent_ok = [&](int64_t upto) {
    for (int64_t j = upto - keep; j < upto; ++j) {
      if (std::memcmp(w.row(j), want.data() + j * dim, dim * sizeof(float)) != 0) return false;
    }
    return true;
  };
  EXPECT_TRUE(recent_ok(n));
  w.truncate(12);
  EXPECT_TRUE(recent_ok(12));
  w.append_stored(want.data() + 12 * dim, 20);  // QDQ'd rows (a state range's) are stored exactly
  EXPECT_TRUE(recent_ok(32));
  EXPECT_TRUE(same_bits(w.decode(0, 32), std::vector<float>(want.begin(), want.begin() + 32 * dim)));
  EXPECT_THROW(w.append_stored(rows.data(), 1), core::Error);  // not on the grid
  w.pad_to(40);
  for (float x : w.decode(32, 40)) ASSERT_TRUE(x == 0.0f && !std::signbit(x)) << "padding is +0";

  // The compressed KV's codec, decoded on read.
  detail::KvRows ckv(dim, detail::RowCodec::kFp4E4m3);
  ckv.append(rows.data(), n);
  std::vector<float> want4 = rows;
  reference_fp4_e4m3_qdq(want4.data(), n * dim);
  EXPECT_TRUE(same_bits(ckv.decode(0, n), want4));
  EXPECT_EQ(ckv.bytes(), n * (dim / 2 + dim / 16));  // FP4 codes + an E4M3 scale per 16

  // QDQ off: fp32 rows kept as given.
  detail::KvRows plain(dim, detail::RowCodec::kFp32, keep);
  plain.append(rows.data(), 5);
  EXPECT_TRUE(same_bits(plain.decode(0, 5), std::vector<float>(rows.begin(), rows.begin() + 5 * dim)));
  EXPECT_EQ(plain.bytes(), 5 * dim * 4);
}

// Bytes of n positions' state for the small config, window and compressed KV compact (qdq) or fp32.
int64_t bytes_per_position(const ModelConfig& c, bool qdq, int64_t n) {
  const int64_t hd = c.head_dim, ixd = c.index_head_dim;
  int64_t b = n * 4 + (c.engram ? n * 8 : 0);
  b += c.num_hidden_layers * n * (qdq ? hd + hd / 32 : hd * 4);
  for (int64_t L = 0; L < c.num_hidden_layers; ++L) {
    const LayerRoles& r = c.layer_roles(L);
    if (r.dspark_target) b += n * c.hidden_size * 4;
    if (!r.owns_compressor) continue;
    if (r.ratio == 2) b += (n + 1) / 2 * hd * 4 * 2;  // compressor inputs u and g of the even positions
    b += n / r.ratio * (qdq ? hd / 2 + hd / 16 : hd * 4);  // compressed KV: FP4 codes + an E4M3 scale per 16
    b += n / r.ratio * ixd * 4;                              // index keys
  }
  return b;
}

TEST(CompactStateV41, StateBytesAreTheCompactSizes) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  for (const bool qdq : {true, false}) {
    PrefillOptions o;
    o.qdq = qdq;
    Sequence seq(*ck, &map, o);
    seq.forward(v41_prompt(40));
    EXPECT_EQ(seq.state_bytes(), bytes_per_position(ck->config(), qdq, 40)) << "qdq " << qdq;
    seq.truncate(17);
    EXPECT_EQ(seq.state_bytes(), bytes_per_position(ck->config(), qdq, 17)) << "qdq " << qdq;
  }
}

// Feeds ids[from ..] token by token: the first position whose logits are not bitwise row p of full, or -1.
int64_t first_row_off(Sequence& seq, const std::vector<int32_t>& ids, int64_t from, const std::vector<float>& full) {
  const size_t V = full.size() / ids.size();
  for (int64_t p = from; p < static_cast<int64_t>(ids.size()); ++p) {
    const std::vector<float> row = seq.forward({ids[p]});
    if (!same_bits(row, std::vector<float>(full.begin() + p * V, full.begin() + (p + 1) * V))) return p;
  }
  return -1;
}

// Rollback to a length whose window (8 positions) lies in rows the recent fp32 copy dropped, then
// token-by-token decode: the one-pass rows bit for bit, QDQ on and off.
TEST(CompactStateV41, RollbackIntoAnOlderWindowContinuesBitwise) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(44);
  for (const bool qdq : {true, false}) {
    PrefillOptions o;
    o.qdq = qdq;
    Sequence one(*ck, &map, o);
    const std::vector<float> full = one.forward(ids);
    Sequence seq(*ck, &map, o);
    seq.forward(ids);
    for (const int64_t back : {13, 30}) {
      seq.truncate(back);
      EXPECT_EQ(first_row_off(seq, ids, back, full), -1) << "qdq " << qdq << " rollback to " << back;
    }
    EXPECT_EQ(seq.stored_kv().window, one.stored_kv().window) << "qdq " << qdq;
  }
}

// Ranges keep what the sequence keeps (ratio-2 inputs of the even positions, compact caches decoded):
// a sequence rebuilt from [0, 20) and [20, 41) (an open ratio-2 group at the end), then rolled back to
// an odd length inside the second range, decodes the one-pass rows bit for bit.
TEST(CompactStateV41, RangesAndRollbackToAnOddLengthContinueBitwise) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(48);
  const std::vector<float> full = Sequence(*ck, &map).forward(ids);
  Sequence src(*ck, &map);
  src.forward(std::vector<int32_t>(ids.begin(), ids.begin() + 41));
  Sequence rebuilt(*ck, &map);
  rebuilt.append_range(src.export_range(0, 20));
  rebuilt.append_range(src.export_range(20, 41));
  EXPECT_EQ(rebuilt.state_bytes(), src.state_bytes());
  for (const int64_t from : {41, 33}) {
    rebuilt.truncate(from);
    EXPECT_EQ(first_row_off(rebuilt, ids, from, full), -1) << "from " << from;
  }
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
