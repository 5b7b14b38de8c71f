// Decoder-side bounded replay (PrefillOptions::decoder_replay_tokens, deepinfer-system.md §2.3): off
// and K >= the prompt are the exact forward bit for bit; with a small K the encoder side (every
// encoder layer's window KV, every kv source's compressed KV and index keys) is still bitwise exact
// and the last position's logits differ from exact only through the decoder windows, so they are
// exact again once K covers the decoder's reach; the approximate state is never exported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "small_v41.h"
#include "model/deepseek_v41/prefill.h"
#include "model/mkmodel.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::TempDir;
using testing::small_v41_checkpoint;
using testing::v41_prompt;

PrefillOptions replay(int64_t k) {
  PrefillOptions o;
  o.decoder_replay_tokens = k;
  return o;
}

struct Outcome {
  std::vector<float> last;     // the prompt's last row
  std::vector<float> decoded;  // the rows of 3 decoded tokens, fed one by one
  StoredKv kv;                 // after the prompt
};

Outcome run(const Checkpoint& ck, const EngramTokenMap& map, const std::vector<int32_t>& ids, const PrefillOptions& o) {
  Sequence seq(ck, &map, o);
  Outcome r;
  r.last = seq.forward(ids, 1);
  r.kv = seq.stored_kv();
  for (int32_t id : {17, 300, 5}) {
    const std::vector<float> row = seq.forward({id});
    r.decoded.insert(r.decoded.end(), row.begin(), row.end());
  }
  return r;
}

// The decoder's reach (model-v41.md §3.3): the last position's output at decoder layer D + i reads
// decoder windows i + 1 hops of W - 1 positions back, so with nd decoder layers the replay start
// must be at most T - 1 - nd (W - 1) for it to be exact.
int64_t decoder_reach(const ModelConfig& c) {
  return (c.num_hidden_layers - decoder_first_layer(c)) * (c.sliding_window - 1) + 1;
}

TEST(DecoderReplayV41, OffAndCoveringThePromptAreExact) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(40);
  const Outcome exact = run(*ck, map, ids, {});
  for (const int64_t k : {0, 40, 64}) {
    const Outcome got = run(*ck, map, ids, replay(k));
    ASSERT_EQ(got.last, exact.last) << "K " << k;
    ASSERT_EQ(got.decoded, exact.decoded) << "K " << k;
    EXPECT_EQ(got.kv.window, exact.kv.window) << "K " << k;
    EXPECT_EQ(got.kv.compressed, exact.kv.compressed) << "K " << k;
    EXPECT_EQ(got.kv.index_keys, exact.kv.index_keys) << "K " << k;
  }
  Sequence seq(*ck, &map, replay(40));
  seq.forward(ids, 1);
  EXPECT_EQ(seq.decoder_replay_start(), -1);  // no replay ran: the state is exact and exportable
  EXPECT_EQ(seq.export_range(0, 40).size(), 40);
}

TEST(DecoderReplayV41, EncoderSideIsExactAndOnlyDecoderWindowsDiffer) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const ModelConfig& c = ck->config();
  const EngramTokenMap map = load_engram_token_map(ck->dir(), c);
  const int64_t T = 40, D = decoder_first_layer(c), reach = decoder_reach(c), hd = c.head_dim;
  ASSERT_EQ(D, 8);       // kv sources 2, 4, 6, 8 of the test config
  ASSERT_EQ(reach, 15);  // 2 decoder layers x (window 8 - 1) + 1
  const std::vector<int32_t> ids = v41_prompt(static_cast<int>(T));
  const Outcome exact = run(*ck, map, ids, {});
  for (const int64_t k : {int64_t{6}, reach - 1, reach}) {
    const Outcome got = run(*ck, map, ids, replay(k));
    const int64_t s = T - k;
    EXPECT_EQ(got.kv.compressed, exact.kv.compressed) << "K " << k;
    EXPECT_EQ(got.kv.index_keys, exact.kv.index_keys) << "K " << k;
    for (const auto& [L, w] : exact.kv.window) {
      const std::vector<float>& g = got.kv.window.at(L);
      ASSERT_EQ(g.size(), w.size()) << "layer " << L;
      if (L < D) {
        EXPECT_EQ(g, w) << "encoder layer " << L << ", K " << k;
        continue;
      }
      for (int64_t i = 0; i < s * hd; ++i) ASSERT_EQ(g[i], 0.0f) << "skipped position, layer " << L;
      // The first decoder layer's window KV is a function of its attention input alone: exact.
      if (L == D) {
        EXPECT_TRUE(std::equal(g.begin() + s * hd, g.end(), w.begin() + s * hd)) << "K " << k;
      }
    }
    if (k >= reach) {
      EXPECT_EQ(got.last, exact.last) << "K " << k;
      EXPECT_EQ(got.decoded, exact.decoded) << "K " << k;  // decode rows reach back no further
    } else {
      EXPECT_NE(got.last, exact.last) << "K " << k;
      for (float x : got.last) ASSERT_TRUE(std::isfinite(x));
    }
  }
}

// Only the latest replay matters: the decoder windows start at its start, and everything before the
// first decoder layer is exact whatever replayed earlier, so a prompt whose last chunk replays gives
// the one-pass replay's rows bit for bit.
TEST(DecoderReplayV41, AChunkedPromptEndingInAReplayGivesTheOnePassRows) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(40);
  const Outcome one = run(*ck, map, ids, replay(6));
  // Split at 30, the first chunk's decoder windows [24, 30) are within a window of the second replay's
  // start 34: only the truncation keeps them (and the one pass's zeros) out.
  for (const int split : {17, 30}) {
    Sequence seq(*ck, &map, replay(6));
    seq.forward(std::vector<int32_t>(ids.begin(), ids.begin() + split), 1);
    EXPECT_EQ(seq.decoder_replay_start(), split - 6);
    EXPECT_EQ(seq.forward(std::vector<int32_t>(ids.begin() + split, ids.end()), 1), one.last) << split;
    EXPECT_EQ(seq.decoder_replay_start(), 34);
    EXPECT_EQ(seq.stored_kv().compressed, one.kv.compressed);
    std::vector<float> decoded;
    for (int32_t id : {17, 300, 5}) {
      const std::vector<float> row = seq.forward({id});
      decoded.insert(decoded.end(), row.begin(), row.end());
    }
    EXPECT_EQ(decoded, one.decoded) << split;
  }
}

// The engine adapter decides per chunk (Sequence::set_decoder_replay_tokens): a sequence made without
// the option, given K for the prompt and 0 afterwards, is bitwise the one made with K.
TEST(DecoderReplayV41, SetPerChunkIsTheOption) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  const std::vector<int32_t> ids = v41_prompt(40);
  const Outcome want = run(*ck, map, ids, replay(6));
  Sequence seq(*ck, &map, {});
  seq.set_decoder_replay_tokens(6);
  EXPECT_EQ(seq.forward(ids, 1), want.last);
  EXPECT_EQ(seq.decoder_replay_start(), 34);
  seq.set_decoder_replay_tokens(0);
  std::vector<float> decoded;
  for (int32_t id : {17, 300, 5}) {
    const std::vector<float> row = seq.forward({id});
    decoded.insert(decoded.end(), row.begin(), row.end());
  }
  EXPECT_EQ(decoded, want.decoded);
  EXPECT_NE(testing::error_of([&] { seq.set_decoder_replay_tokens(-1); }).find("decoder replay of -1"),
            std::string::npos);
}

TEST(DecoderReplayV41, TheApproximateStateIsNeverExported) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  Sequence seq(*ck, &map, replay(6));
  // Only the last K rows exist: asking for more is refused before anything is fed.
  std::string msg = testing::error_of([&] { seq.forward(v41_prompt(20)); });
  EXPECT_NE(msg.find("last 6 positions only"), std::string::npos) << msg;
  EXPECT_EQ(seq.length(), 0);
  ASSERT_EQ(seq.forward(v41_prompt(20), 6).size(), static_cast<size_t>(6 * ck->config().vocab_size));
  EXPECT_EQ(seq.decoder_replay_start(), 14);
  msg = testing::error_of([&] { seq.export_range(0, 20); });
  EXPECT_NE(msg.find("bounded replay"), std::string::npos) << msg;
  msg = testing::error_of([&] { seq.export_range(16, 20); });
  EXPECT_NE(msg.find("bounded replay"), std::string::npos) << msg;
  msg = testing::error_of([&] { seq.truncate(14); });
  EXPECT_NE(msg.find("replay start"), std::string::npos) << msg;
  // Decode and rollback after the replay start go on.
  seq.forward({7});
  seq.truncate(18);
  EXPECT_EQ(seq.length(), 18);
  EXPECT_EQ(seq.dspark_round(9, 2).size(), 2u);
  msg = testing::error_of([&] { seq.dspark_draft0(); });
  EXPECT_NE(msg.find("bounded replay"), std::string::npos) << msg;
  seq.truncate(0);  // nothing left: exact again
  EXPECT_EQ(seq.decoder_replay_start(), -1);
}

TEST(DecoderReplayV41, RefusedWithoutTheEncoderDecoderStructure) {
  TempDir dir;
  auto ck = small_v41_checkpoint(dir, 3);
  const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
  ModelConfig c = ck->config();
  c.roles[8].kv_source = 6;  // a decoder layer reading an encoder layer's compressed KV
  EXPECT_NE(testing::error_of([&] { decoder_first_layer(c); }).find("decoder layer 8 reads the compressed KV of layer 6"),
            std::string::npos);
  for (LayerRoles& r : c.roles) r.owns_compressor = false;
  EXPECT_NE(testing::error_of([&] { decoder_first_layer(c); }).find("no kv source"), std::string::npos);
  const ModelConfig v4 = testing::parse(testing::small_config());
  EXPECT_NE(testing::error_of([&] { decoder_first_layer(v4); }).find("encoder/decoder"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { Sequence(*ck, &map, replay(-1)); }).find("decoder replay of -1"),
            std::string::npos);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
