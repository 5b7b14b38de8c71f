// Prefix caching on the per-sequence state: shared full blocks, window snapshots (exact resume) and SWA
// bounded replay (deepinfer-system.md §2.3); plus the state's storage pieces.
#include <gtest/gtest.h>

#include <cmath>

#include "model/deepseek_v4/kv_codec.h"
#include "model/deepseek_v4/position_ring.h"
#include "test_models.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

using testing::first_difference;
using testing::random_tokens;
using testing::run_chunks;

class V4State : public testing::TinyModelSuite {};

bool same_bytes(const BlockRef& a, const BlockRef& b) {
  const auto x = a->bytes(), y = b->bytes();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

TEST_F(V4State, BlocksFreezeEvery128PositionsAndAreShared) {
  EXPECT_EQ(model_->shape().block_tokens, 128);
  auto st = model_->new_sequence();
  const auto tokens = random_tokens(300, 512, 20);
  run_chunks(*model_, *st, tokens, 0, 127, {127});
  EXPECT_EQ(st->blocks().size(), 0u);
  run_chunks(*model_, *st, tokens, 127, 128, {1});
  ASSERT_EQ(st->blocks().size(), 1u);
  const BlockRef first = st->blocks()[0];
  run_chunks(*model_, *st, tokens, 128, 300, {50});
  ASSERT_EQ(st->blocks().size(), 2u);
  EXPECT_EQ(st->blocks()[0].get(), first.get());  // never rewritten
  EXPECT_EQ(st->blocks()[1]->index(), 1);
  const StateMemory mem = st->memory();
  EXPECT_EQ(mem.full_blocks, 2 * model_->block_layout()->bytes());
  EXPECT_GT(mem.windows, 0u);
  EXPECT_GT(mem.tails, 0u);
  EXPECT_GT(model_->sequence_bytes(), 0u);
}

TEST_F(V4State, SnapshotRestoreResumesBitwise) {
  const int64_t T = 330;
  const auto tokens = random_tokens(T, 512, 21);
  auto ref_state = model_->new_sequence();
  const auto ref = run_chunks(*model_, *ref_state, tokens, 0, T, {T});
  for (int64_t at : {int64_t{128}, int64_t{256}, int64_t{200}, int64_t{37}}) {
    auto a = model_->new_sequence();
    run_chunks(*model_, *a, tokens, 0, at, {at});
    const WindowSnapshot snap = a->snapshot();
    EXPECT_EQ(snap.position(), at);
    // Round trip through bytes, as a KV store would.
    const WindowSnapshot stored = WindowSnapshot::from_bytes(snap.bytes());

    // (1) a fresh sequence on the shared blocks of the prefix.
    auto b = model_->new_sequence();
    b->attach_prefix(a->blocks());
    if (!a->blocks().empty()) {
      EXPECT_TRUE(b->needs_window_state());
      std::vector<SequenceOutput> out(1);
      SequenceInput in;
      in.state = b.get();
      in.tokens = std::span<const int32_t>(tokens.data() + at, 1);
      EXPECT_THROW(model_->forward({&in, 1}, out), core::Error);
    }
    b->restore(stored);
    EXPECT_EQ(b->length(), at);
    const auto got_b = run_chunks(*model_, *b, tokens, at, T, {17, 1, 64});
    EXPECT_EQ(first_difference(std::vector<float>(ref.begin() + at * 512, ref.end()), got_b), -1) << "at " << at;

    // (2) the same sequence after it went on (and beyond a block boundary): back to the snapshot.
    run_chunks(*model_, *a, tokens, at, std::min<int64_t>(T, at + 140), {70});
    a->restore(snap);
    const auto got_a = run_chunks(*model_, *a, tokens, at, T, {T - at});
    EXPECT_EQ(first_difference(std::vector<float>(ref.begin() + at * 512, ref.end()), got_a), -1) << "at " << at;
    ASSERT_EQ(a->blocks().size(), ref_state->blocks().size());
    for (size_t i = 0; i < a->blocks().size(); ++i) EXPECT_TRUE(same_bytes(a->blocks()[i], ref_state->blocks()[i]));
  }
  // Aligned snapshots carry no block bytes: they are much smaller than an unaligned one.
  auto c = model_->new_sequence();
  run_chunks(*model_, *c, tokens, 0, 256, {256});
  const size_t aligned = c->snapshot().size_bytes();
  run_chunks(*model_, *c, tokens, 256, 300, {44});
  EXPECT_LT(aligned, c->snapshot().size_bytes());
}

TEST_F(V4State, BoundedReplayKeepsBlocksAndStaysClose) {
  const int64_t T = 360, h = 256;
  const auto tokens = random_tokens(T, 512, 22);
  auto ref_state = model_->new_sequence();
  const auto ref = run_chunks(*model_, *ref_state, tokens, 0, T, {T});
  std::vector<BlockRef> prefix(ref_state->blocks().begin(), ref_state->blocks().begin() + h / 128);
  std::vector<std::vector<uint8_t>> before;
  for (const auto& b : prefix) before.emplace_back(b->bytes().begin(), b->bytes().end());

  auto st = model_->new_sequence();
  st->attach_prefix(prefix);
  const int64_t s = st->begin_bounded_replay();
  EXPECT_EQ(s, h - model_->shape().window);
  EXPECT_EQ(st->length(), s);
  EXPECT_EQ(st->window_floor(), s);
  // Replay in two chunks, then continue past h in mixed chunks.
  run_chunks(*model_, *st, tokens, s, h, {20, 12});
  EXPECT_EQ(st->length(), h);
  const auto cont = run_chunks(*model_, *st, tokens, h, T, {1, 30, 73});
  for (size_t i = 0; i < prefix.size(); ++i) {
    EXPECT_EQ(st->blocks()[i].get(), prefix[i].get()) << "attached block " << i << " replaced";
    EXPECT_TRUE(std::equal(before[i].begin(), before[i].end(), prefix[i]->bytes().begin())) << "block " << i << " rewritten";
  }
  // The continuation is an approximation (truncated windows during replay): finite, and its rows stay
  // near the exact ones (random weights; measured median row error ~0.1-0.3).
  std::vector<double> rel;
  for (int64_t r = 0; r < T - h; ++r) {
    double num = 0, den = 0;
    for (int64_t v = 0; v < 512; ++v) {
      const double a = cont[r * 512 + v], b = ref[(h + r) * 512 + v];
      ASSERT_TRUE(std::isfinite(a));
      num += (a - b) * (a - b);
      den += b * b;
    }
    rel.push_back(std::sqrt(num / den));
  }
  std::sort(rel.begin(), rel.end());
  EXPECT_LT(rel[rel.size() / 2], 0.5);
  // A second replay of the same prefix gives bitwise the same continuation (deterministic).
  auto st2 = model_->new_sequence();
  st2->attach_prefix(prefix);
  st2->begin_bounded_replay();
  run_chunks(*model_, *st2, tokens, s, h, {32});
  EXPECT_EQ(first_difference(cont, run_chunks(*model_, *st2, tokens, h, T, {T - h})), -1);
}

TEST_F(V4State, AttachRejectsWrongBlocks) {
  const auto tokens = random_tokens(260, 512, 23);
  auto a = model_->new_sequence();
  run_chunks(*model_, *a, tokens, 0, 260, {260});
  auto b = model_->new_sequence();
  std::vector<BlockRef> wrong_order = {a->blocks()[1], a->blocks()[0]};
  EXPECT_THROW(b->attach_prefix(wrong_order), core::Error);
  std::vector<BlockRef> with_null = {nullptr};
  EXPECT_THROW(b->attach_prefix(with_null), core::Error);
  EXPECT_THROW(a->attach_prefix(std::vector<BlockRef>{a->blocks()[0]}), core::Error);  // not fresh
  // Rebuilt from bytes (e.g. read back from a store), a block is interchangeable.
  auto c = model_->new_sequence();
  std::vector<BlockRef> copies;
  for (const auto& blk : a->blocks()) copies.push_back(CompressedBlock::from_bytes(model_->block_layout(), blk->index(), blk->bytes()));
  c->attach_prefix(copies);
  c->begin_bounded_replay();
  EXPECT_THROW(CompressedBlock::from_bytes(model_->block_layout(), 0, std::span<const uint8_t>(a->blocks()[0]->bytes().data(), 10)),
               core::Error);
  EXPECT_THROW(WindowSnapshot::from_bytes(std::vector<uint8_t>(40, 0)), core::Error);
}

TEST(V4KvCodec, DecodeGivesExactlyTheQdqValues) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  for (bool fp8 : {true, false}) {
    for (bool bf16 : {true, false}) {
      KvCodec codec(512, 64, fp8, bf16);
      EXPECT_EQ(codec.bytes(), (fp8 ? 448 + 7 : 448 * 4) + 64 * (bf16 ? 2 : 4));
      std::vector<float> x(512), y(512);
      for (auto& v : x) v = dist(rng);
      const auto orig = x;
      std::vector<uint8_t> bytes(codec.bytes());
      codec.encode(x.data(), bytes.data());
      codec.decode(bytes.data(), y.data());
      EXPECT_EQ(first_difference(x, y), -1);
      if (!fp8 && !bf16) {
        EXPECT_EQ(first_difference(orig, y), -1);  // lossless when QDQ is off
      }
      if (fp8) {
        EXPECT_NE(first_difference(orig, y), -1);
      }
      for (int i = 448; i < 512 && !bf16; ++i) EXPECT_EQ(y[i], orig[i]);  // rope dims untouched in exact mode
    }
  }
  IndexKeyCodec key(128, true);
  EXPECT_EQ(key.bytes(), 64 + 4);  // model-v4.md §3.1: 68 B per indexer key
  KvCodec flash(512, 64, true, true);
  EXPECT_EQ(flash.bytes(), 583);   // §3.1: 583 B per KV entry
}

TEST(V4PositionRing, KeepsRowsByPositionAcrossGrowthAndTruncation) {
  PositionRing ring(sizeof(float), 4);
  ring.reset(10);
  ring.extend(13);
  for (int64_t p = 10; p < 13; ++p) *ring.frow(p) = static_cast<float>(p);
  ring.extend(30);  // grows
  for (int64_t p = 13; p < 30; ++p) *ring.frow(p) = static_cast<float>(p);
  for (int64_t p = 10; p < 30; ++p) ASSERT_EQ(*ring.frow(p), static_cast<float>(p));
  ring.drop_before(27);
  ring.shrink_for(1);
  EXPECT_EQ(ring.begin(), 27);
  for (int64_t p = 27; p < 30; ++p) ASSERT_EQ(*ring.frow(p), static_cast<float>(p));
  EXPECT_LE(ring.capacity_bytes(), 8 * sizeof(float));
  ring.truncate(28);
  EXPECT_EQ(ring.end(), 28);
  ring.extend(29);
  *ring.frow(28) = -1.0f;
  EXPECT_EQ(*ring.frow(27), 27.0f);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
