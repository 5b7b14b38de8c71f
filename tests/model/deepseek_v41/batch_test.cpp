// Sequence::forward_batch: several sequences through the layers together (every product over the rows
// of all of them) give each sequence bitwise its own forward's logits, in every mix of fresh
// prefills, continued chunks, decode tokens, rolled-back sequences and logit-row counts, and leave
// each sequence's state so that it continues bitwise as when fed alone. Both numerics: exact and
// --numerics fast (int8 expert products, bf16 head), which are row-local too. forward_batch_into: the
// same bits written into the caller's buffer.
#include <gtest/gtest.h>

#include <memory>

#include "model/deepseek_v41/prefill.h"
#include "small_v41.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

using testing::small_v41_checkpoint;
using testing::TempDir;
using testing::v41_prompt;

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t begin, size_t n) {
  return std::vector<int32_t>(v.begin() + begin, v.begin() + begin + n);
}

// A batched sequence (on the shared weights) and its twin fed the same chunks alone (its own weights).
struct Pair {
  std::unique_ptr<Sequence> batched, alone;
  std::vector<int32_t> ids;  // the tokens the pair's chunks come from
  size_t fed = 0;
};

// The parameter: --numerics fast (true) or exact.
class BatchV41 : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    ck_ = small_v41_checkpoint(dir_, 5);
    map_ = std::make_unique<EngramTokenMap>(load_engram_token_map(ck_->dir(), ck_->config()));
    weights_ = prepare_weights(*ck_, options());
  }

  static PrefillOptions options() {
    PrefillOptions o;
    o.fast = GetParam();
    return o;
  }

  Pair make(int salt, size_t prefed) {
    Pair p;
    p.batched = std::make_unique<Sequence>(*ck_, map_.get(), options(), weights_);
    p.alone = std::make_unique<Sequence>(*ck_, map_.get(), options());
    for (int i = 0; i < 120; ++i) p.ids.push_back(static_cast<int32_t>((i * 131 + salt * 977 + 5) % 512));
    if (prefed > 0) {  // history fed alone before the batch (both sides)
      p.batched->forward(slice(p.ids, 0, prefed), 0);
      p.alone->forward(slice(p.ids, 0, prefed), 0);
      p.fed = prefed;
    }
    return p;
  }

  // One batched step: pairs[k] takes its next counts[k] ids, logits of its last rows[k]; each result
  // must be bitwise its twin's alone.
  void step(std::vector<Pair*> pairs, const std::vector<size_t>& counts, const std::vector<int64_t>& rows,
            const char* what) {
    std::vector<Sequence*> seqs;
    std::vector<std::vector<int32_t>> ids;
    for (size_t k = 0; k < pairs.size(); ++k) {
      seqs.push_back(pairs[k]->batched.get());
      ids.push_back(slice(pairs[k]->ids, pairs[k]->fed, counts[k]));
    }
    const std::vector<std::vector<float>> got = Sequence::forward_batch(seqs, ids, rows);
    ASSERT_EQ(got.size(), pairs.size());
    const int64_t V = ck_->config().vocab_size;
    for (size_t k = 0; k < pairs.size(); ++k) {
      const std::vector<float> want = pairs[k]->alone->forward(ids[k], rows[k]);
      ASSERT_EQ(want.size(), static_cast<size_t>(rows[k] * V));
      ASSERT_EQ(got[k].size(), want.size()) << what << " item " << k;
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[k][i], want[i]) << what << " item " << k << " element " << i;
      pairs[k]->fed += counts[k];
      ASSERT_EQ(pairs[k]->batched->length(), static_cast<int64_t>(pairs[k]->fed));
    }
  }

  TempDir dir_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<EngramTokenMap> map_;
  std::shared_ptr<PreparedWeights> weights_;
};

// The small config: window 8, ratio-2 and ratio-1 kv sources, top-4 selection, Engram, DSpark taps.
TEST_P(BatchV41, MixedBatchIsBitwiseEachSequenceAlone) {
  Pair fresh = make(1, 0), decode = make(2, 20), chunk = make(3, 11), one = make(4, 0), rolled = make(5, 25);
  rolled.batched->truncate(22);  // a rolled-back sequence in the batch
  rolled.alone->truncate(22);
  rolled.fed = 22;
  // A fresh 30-token prefill, a decode token, a continued chunk of 7, a first token, a silent chunk.
  step({&fresh, &decode, &chunk, &one, &rolled}, {30, 1, 7, 1, 3}, {30, 1, 2, 1, 0}, "mixed");
  // Every sequence decodes one token, in another order.
  step({&one, &rolled, &fresh, &chunk, &decode}, {1, 1, 1, 1, 1}, {1, 1, 1, 1, 1}, "decode");
  // A long chunk (window wraps, compressed groups complete) beside decode tokens.
  step({&decode, &chunk, &fresh}, {1, 40, 1}, {1, 40, 1}, "long chunk");
  // A batch of one is the plain forward.
  step({&one}, {5}, {3}, "alone");
  // The states the batches left continue bitwise: the teacher-forced draft head from the kept taps.
  const std::vector<float> a = chunk.batched->dspark_draft0(), b = chunk.alone->dspark_draft0();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "draft 0 element " << i;
}

// forward_batch_into: the same bits appended to the caller's buffer, item after item, after what it
// held; a buffer kept across steady decode steps (cleared, capacity kept) is written in place, never
// reallocated (the engine adapter's per-step logits, which glibc would otherwise map afresh each step).
TEST_P(BatchV41, IntoTheCallersBufferIsBitwiseAndInPlace) {
  Pair a = make(1, 9), b = make(2, 14), c = make(3, 3);
  const int64_t V = ck_->config().vocab_size;
  std::vector<float> logits = {-1.0f, -2.0f};  // kept: the result is appended
  logits.reserve(2 + static_cast<size_t>(4 * V));
  const float* buffer = logits.data();
  auto step = [&](const std::vector<size_t>& counts, const std::vector<int64_t>& rows, const char* what) {
    std::vector<Pair*> pairs = {&a, &b, &c};
    std::vector<Sequence*> seqs;
    std::vector<std::vector<int32_t>> ids;
    for (size_t k = 0; k < pairs.size(); ++k) {
      seqs.push_back(pairs[k]->batched.get());
      ids.push_back(slice(pairs[k]->ids, pairs[k]->fed, counts[k]));
    }
    const size_t from = logits.size();
    Sequence::forward_batch_into(seqs, ids, rows, logits);
    EXPECT_EQ(logits.data(), buffer) << what << ": the buffer was reallocated";
    size_t at = from;
    for (size_t k = 0; k < pairs.size(); ++k) {
      const std::vector<float> want = pairs[k]->alone->forward(ids[k], rows[k]);
      ASSERT_EQ(want.size(), static_cast<size_t>(rows[k] * V));
      ASSERT_GE(logits.size(), at + want.size()) << what << " item " << k;
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(logits[at + i], want[i]) << what << " item " << k << " element " << i;
      at += want.size();
      pairs[k]->fed += counts[k];
    }
    ASSERT_EQ(logits.size(), at) << what;
  };
  step({3, 1, 2}, {2, 1, 0}, "mixed");  // a chunk, a decode token, a silent chunk
  EXPECT_EQ(logits[0], -1.0f);
  EXPECT_EQ(logits[1], -2.0f);
  for (int s = 0; s < 3; ++s) {  // steady decode: the buffer cleared and refilled in place
    logits.clear();
    step({1, 1, 1}, {1, 1, 1}, "decode");
  }
}

// A batch context lives for one step but borrows its chunk buffers (streams, attention output, expert
// scratch) from the thread, which keeps them between steps: steps of falling and rising row counts,
// a batch of another checkpoint (other weights, so other values in the buffers) in between, and a
// chunk above the kept bound (its buffers given back) each give bitwise the twins' logits alone.
TEST_P(BatchV41, KeptChunkBuffersCarryNothingBetweenSteps) {
  Pair a = make(1, 6), b = make(2, 9), c = make(3, 2);
  step({&a, &b, &c}, {30, 30, 30}, {1, 2, 30}, "90 rows");
  step({&b, &a}, {1, 1}, {1, 1}, "2 rows");
  {
    TempDir dir;
    auto ck = small_v41_checkpoint(dir, 6);
    const EngramTokenMap map = load_engram_token_map(ck->dir(), ck->config());
    const auto w = prepare_weights(*ck, options());
    Sequence x(*ck, &map, options(), w), y(*ck, &map, options(), w);
    const std::vector<std::vector<float>> out = Sequence::forward_batch({&x, &y}, {v41_prompt(40), v41_prompt(7)}, {1, 1});
    ASSERT_EQ(out.size(), 2u);
  }
  step({&c, &a, &b}, {1, 3, 1}, {1, 3, 1}, "5 rows after another checkpoint's batch");
  step({&a, &b}, {70, 70}, {1, 70}, "140 rows (given back)");
  step({&a, &b, &c}, {1, 1, 1}, {1, 1, 1}, "3 rows");
}

TEST_P(BatchV41, RefusesWhatItCannotBatch) {
  Pair a = make(1, 4), b = make(2, 4);
  const std::vector<std::vector<int32_t>> ids = {{1}, {2}};
  std::string msg = testing::error_of([&] {
    Sequence::forward_batch({a.batched.get(), a.batched.get()}, ids, {1, 1});
  });
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
  // Its own weights: not the first sequence's prepared ones.
  msg = testing::error_of([&] { Sequence::forward_batch({a.batched.get(), b.alone.get()}, ids, {1, 1}); });
  EXPECT_NE(msg.find("prepared weights"), std::string::npos) << msg;
  // A chunk that a decoder replay shortens runs alone.
  PrefillOptions replay = options();
  replay.decoder_replay_tokens = 2;
  Sequence r(*ck_, map_.get(), replay, weights_);
  msg = testing::error_of([&] { Sequence::forward_batch({a.batched.get(), &r}, {{1}, {1, 2, 3}}, {1, 1}); });
  EXPECT_NE(msg.find("runs alone"), std::string::npos) << msg;
  // Nothing was fed by a refused batch.
  EXPECT_EQ(a.batched->length(), 4);
  EXPECT_EQ(r.length(), 0);
}

INSTANTIATE_TEST_SUITE_P(Numerics, BatchV41, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Fast" : "Exact"; });

}  // namespace
}  // namespace dsinfer::model::deepseek_v41
