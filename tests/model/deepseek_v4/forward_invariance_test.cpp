// The chunk, rollback and batch semantics of model-v4.md §2.13 / §3.4: any split of a prompt into
// chunks, any rollback of a multi-token step and any batch composition or thread count give bitwise
// the same logits as one pass of the sequence alone.
#include <gtest/gtest.h>

#include <cmath>

#include "test_models.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

using testing::first_difference;
using testing::random_tokens;
using testing::run_chunks;

class V4Forward : public testing::TinyModelSuite {};

TEST_F(V4Forward, LogitsAreFiniteAndVary) {
  auto st = model_->new_sequence();
  const auto tokens = random_tokens(40, 512, 1);
  const auto logits = run_chunks(*model_, *st, tokens, 0, 40, {40});
  ASSERT_EQ(logits.size(), 40u * 512u);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  // Different positions give different distributions (the model is not degenerate).
  EXPECT_NE(first_difference({logits.begin(), logits.begin() + 512}, {logits.begin() + 512, logits.begin() + 1024}),
            -1);
  EXPECT_EQ(st->length(), 40);
}

TEST_F(V4Forward, AnyChunkingIsBitwiseOnePass) {
  const int64_t T = 300;  // crosses two 128-blocks, the 32-window many times, top-k pruning after 36
  const auto tokens = random_tokens(T, 512, 2);
  auto ref_state = model_->new_sequence();
  const auto ref = run_chunks(*model_, *ref_state, tokens, 0, T, {T});
  for (const std::vector<int64_t>& chunks :
       std::vector<std::vector<int64_t>>{{1}, {5}, {37}, {128}, {127, 1, 2, 3, 64, 9}, {200, 100}}) {
    auto st = model_->new_sequence();
    const auto got = run_chunks(*model_, *st, tokens, 0, T, chunks);
    const int64_t diff = first_difference(ref, got);
    EXPECT_EQ(diff, -1) << "chunk pattern starting " << chunks[0] << ": first difference at position "
                        << (diff < 0 ? -1 : diff / 512);
    EXPECT_EQ(st->length(), T);
    ASSERT_EQ(st->blocks().size(), ref_state->blocks().size());
    for (size_t b = 0; b < st->blocks().size(); ++b) {
      const auto x = st->blocks()[b]->bytes(), y = ref_state->blocks()[b]->bytes();
      EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << "block " << b;
    }
  }
}

TEST_F(V4Forward, RollbackOfAnyStepRestoresExactly) {
  const int64_t T = 280;
  const auto tokens = random_tokens(T, 512, 3);
  auto ref_state = model_->new_sequence();
  const auto ref = run_chunks(*model_, *ref_state, tokens, 0, T, {T});

  // Steps of the real tokens interleaved with junk steps that are rolled back, partly or entirely:
  // (real tokens to feed, junk tokens, how many junk tokens to keep... none: truncate to the real end).
  struct Step { int64_t real, junk; };
  const std::vector<Step> steps = {{3, 5}, {1, 8}, {60, 1}, {2, 70}, {62, 7}, {1, 1}, {1, 127}, {150, 3}};
  auto st = model_->new_sequence();
  std::vector<float> got;
  std::vector<SequenceOutput> out(1);
  int64_t pos = 0;
  uint32_t seed = 100;
  for (const Step& s : steps) {
    const int64_t n = std::min(s.real, T - pos);
    if (n <= 0) break;
    const auto part = run_chunks(*model_, *st, tokens, pos, pos + n, {n});
    got.insert(got.end(), part.begin(), part.end());
    pos += n;
    const auto junk = random_tokens(s.junk, 512, seed++);
    SequenceInput in;
    in.state = st.get();
    in.tokens = junk;
    model_->forward({&in, 1}, out);
    ASSERT_EQ(st->rollback_floor(), pos);
    st->truncate(pos);
    EXPECT_EQ(st->length(), pos);
  }
  ASSERT_EQ(pos, T);
  const int64_t diff = first_difference(ref, got);
  EXPECT_EQ(diff, -1) << "first difference at position " << diff / 512;
  ASSERT_EQ(st->blocks().size(), ref_state->blocks().size());
  for (size_t b = 0; b < st->blocks().size(); ++b) {
    const auto x = st->blocks()[b]->bytes(), y = ref_state->blocks()[b]->bytes();
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin())) << "block " << b;
  }
}

TEST_F(V4Forward, StepsWithoutRollbackGiveTheSameResultsAndFreeTheirRows) {
  const int64_t T = 200;
  const auto tokens = random_tokens(T, 512, 9);
  auto a = model_->new_sequence();
  const auto ref = run_chunks(*model_, *a, tokens, 0, T, {150, 50});
  auto b = model_->new_sequence();
  std::vector<float> got;
  std::vector<SequenceOutput> out(1);
  for (int64_t p = 0; p < T;) {
    const int64_t n = p == 0 ? 150 : 50;
    SequenceInput in;
    in.state = b.get();
    in.tokens = std::span<const int32_t>(tokens.data() + p, n);
    in.logits = LogitRows::kAll;
    in.rollback = false;
    model_->forward({&in, 1}, out);
    got.insert(got.end(), out[0].logits.begin(), out[0].logits.end());
    p += n;
    EXPECT_EQ(b->rollback_floor(), p);
  }
  EXPECT_EQ(first_difference(ref, got), -1);
  EXPECT_THROW(b->truncate(T - 1), core::Error);
  const auto with = a->memory(), without = b->memory();
  EXPECT_LT(without.tails + without.windows, with.tails + with.windows);
  // Both continue identically.
  const auto more = random_tokens(20, 512, 19);
  EXPECT_EQ(first_difference(run_chunks(*model_, *a, more, 0, 20, {1}), run_chunks(*model_, *b, more, 0, 20, {1})), -1);
}

TEST_F(V4Forward, PartialRollbackKeepsAcceptedPrefix) {
  // A verify step of 8 tokens of which the first 3 are "accepted" equals feeding those 3 directly.
  const auto tokens = random_tokens(150, 512, 4);
  auto a = model_->new_sequence();
  auto b = model_->new_sequence();
  run_chunks(*model_, *a, tokens, 0, 125, {125});
  run_chunks(*model_, *b, tokens, 0, 125, {125});
  std::vector<int32_t> verify(tokens.begin() + 125, tokens.begin() + 133);  // crosses the block at 128
  verify[3] = 1;  // rejected draft
  SequenceInput in;
  in.state = b.get();
  in.tokens = verify;
  std::vector<SequenceOutput> out(1);
  model_->forward({&in, 1}, out);
  b->truncate(128);
  EXPECT_EQ(b->blocks().size(), 1u);
  const auto ra = run_chunks(*model_, *a, tokens, 125, 150, {25});
  const auto rb = run_chunks(*model_, *b, tokens, 128, 150, {22});
  ASSERT_EQ(first_difference(std::vector<float>(ra.begin() + 3 * 512, ra.end()), rb), -1);
  EXPECT_THROW(b->truncate(127), core::Error);  // below the length before the last step
}

TEST_F(V4Forward, BatchCompositionAndThreadCountDoNotChangeResults) {
  // Four sequences alone (one thread) vs together in batches with other sequences at other positions
  // and chunk lengths (three threads).
  const int64_t T = 200;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) prompts.push_back(random_tokens(T, 512, 10 + i));
  ModelOptions one;
  one.threads = 1;
  auto m1 = Model::load(*dir_, one);
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    auto st = m1->new_sequence();
    alone.push_back(run_chunks(*m1, *st, p, 0, T, {T}));
  }
  ModelOptions three;
  three.threads = 3;
  auto m3 = Model::load(*dir_, three);
  std::vector<std::unique_ptr<SequenceState>> states;
  for (int i = 0; i < 4; ++i) states.push_back(m3->new_sequence());
  std::vector<std::vector<float>> got(4);
  std::vector<int64_t> pos(4, 0);
  // Sequence i advances by a different pattern; some steps leave sequences out.
  const std::vector<std::vector<int64_t>> pattern = {{1, 7, 64}, {33, 2}, {100, 1, 1}, {5}};
  std::mt19937 rng(5);
  int step = 0;
  while (pos[0] < T || pos[1] < T || pos[2] < T || pos[3] < T) {
    std::vector<SequenceInput> batch;
    std::vector<int> who;
    for (int i = 0; i < 4; ++i) {
      if (pos[i] >= T || (rng() % 3 == 0 && step > 0)) continue;
      const auto& pat = pattern[i];
      const int64_t n = std::min(pat[(step + i) % pat.size()], T - pos[i]);
      SequenceInput in;
      in.state = states[i].get();
      in.tokens = std::span<const int32_t>(prompts[i].data() + pos[i], n);
      in.logits = LogitRows::kAll;
      batch.push_back(in);
      who.push_back(i);
      pos[i] += n;
    }
    ++step;
    if (batch.empty()) continue;
    std::vector<SequenceOutput> out(batch.size());
    m3->forward(batch, out);
    for (size_t k = 0; k < who.size(); ++k) got[who[k]].insert(got[who[k]].end(), out[k].logits.begin(), out[k].logits.end());
  }
  for (int i = 0; i < 4; ++i) {
    const int64_t diff = first_difference(alone[i], got[i]);
    EXPECT_EQ(diff, -1) << "sequence " << i << " differs first at position " << diff / 512;
  }
}

TEST_F(V4Forward, LastRowLogitsAndHiddenMatchAllRows) {
  const auto tokens = random_tokens(50, 512, 6);
  auto a = model_->new_sequence();
  const auto all = run_chunks(*model_, *a, tokens, 0, 50, {50});
  auto b = model_->new_sequence();
  SequenceInput in;
  in.state = b.get();
  in.tokens = tokens;
  in.logits = LogitRows::kLast;
  in.want_hidden = true;
  std::vector<SequenceOutput> out(1);
  model_->forward({&in, 1}, out);
  ASSERT_EQ(out[0].logit_rows, 1);
  EXPECT_EQ(first_difference(std::vector<float>(all.end() - 512, all.end()), out[0].logits), -1);
  EXPECT_EQ(out[0].hidden.size(), static_cast<size_t>(50 * model_->shape().hc_dim()));
}

TEST_F(V4Forward, MtpChunkingAndRollbackAreBitwise) {
  const int64_t T = 90;
  const auto tokens = random_tokens(T, 512, 7);
  auto st = model_->new_sequence();
  SequenceInput in;
  in.state = st.get();
  in.tokens = tokens;
  in.logits = LogitRows::kNone;
  in.want_hidden = true;
  std::vector<SequenceOutput> out(1);
  model_->forward({&in, 1}, out);
  const std::vector<float> hidden = out[0].hidden;
  const int64_t hd = model_->shape().hc_dim();
  auto mtp = [&](SequenceState& s, int64_t b, int64_t n, LogitRows rows) {
    MtpInput mi;
    mi.state = &s;
    mi.hidden = std::span<const float>(hidden.data() + b * hd, n * hd);
    mi.tokens = std::span<const int32_t>(tokens.data() + b + 1, n);
    mi.logits = rows;
    std::vector<SequenceOutput> o(1);
    model_->mtp_forward({&mi, 1}, o);
    return o[0].logits;
  };
  const auto ref = mtp(*st, 0, T - 1, LogitRows::kAll);
  EXPECT_EQ(st->mtp_length(), T - 1);
  auto st2 = model_->new_sequence();
  in.state = st2.get();
  model_->forward({&in, 1}, out);
  std::vector<float> got;
  for (int64_t b = 0; b < T - 1;) {
    const int64_t n = std::min<int64_t>(b % 3 + 1, T - 1 - b);
    const auto part = mtp(*st2, b, n, LogitRows::kAll);
    got.insert(got.end(), part.begin(), part.end());
    // junk rows rolled back
    const int64_t len = st2->mtp_length();
    mtp(*st2, (b * 7) % (T - 5), 4, LogitRows::kLast);
    st2->truncate_mtp(len);
    b += n;
  }
  EXPECT_EQ(first_difference(ref, got), -1);

  // Chained drafts: three MTP calls of one row each (the block's own output streams as the next
  // input), all undone at once, leave the MTP rows as they were.
  auto st3 = model_->new_sequence();
  in.state = st3.get();
  model_->forward({&in, 1}, out);
  mtp(*st3, 0, 50, LogitRows::kNone);
  const int64_t base = st3->mtp_length();
  auto chain = [&] {
    std::vector<float> h(hidden.begin() + 50 * hd, hidden.begin() + 51 * hd);
    std::vector<float> logits;
    for (int step = 0; step < 3; ++step) {
      MtpInput mi;
      mi.state = st3.get();
      mi.hidden = h;
      const int32_t tok = tokens[51 + step];
      mi.tokens = std::span<const int32_t>(&tok, 1);
      mi.logits = LogitRows::kLast;
      mi.want_hidden = true;
      std::vector<SequenceOutput> o(1);
      model_->mtp_forward({&mi, 1}, o);
      h = o[0].hidden;
      logits.insert(logits.end(), o[0].logits.begin(), o[0].logits.end());
    }
    return logits;
  };
  const auto first_chain = chain();
  st3->truncate_mtp(base);
  EXPECT_EQ(first_difference(first_chain, chain()), -1);
  st3->truncate_mtp(base);
  const auto after = mtp(*st3, 50, T - 51, LogitRows::kAll);
  EXPECT_EQ(first_difference(std::vector<float>(ref.begin() + 50 * 512, ref.end()), after), -1);
}

TEST_F(V4Forward, BadInputsAreRejectedWithoutChangingState) {
  auto st = model_->new_sequence();
  const auto tokens = random_tokens(10, 512, 8);
  run_chunks(*model_, *st, tokens, 0, 10, {10});
  std::vector<int32_t> bad = {5, 512};
  SequenceInput in;
  in.state = st.get();
  in.tokens = bad;
  std::vector<SequenceOutput> out(1);
  try {
    model_->forward({&in, 1}, out);
    FAIL() << "out-of-vocabulary token accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("offset 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(st->length(), 10);
  in.tokens = {};
  EXPECT_THROW(model_->forward({&in, 1}, out), core::Error);
  SequenceInput twice[2] = {in, in};
  twice[0].tokens = twice[1].tokens = std::span<const int32_t>(tokens.data(), 1);
  std::vector<SequenceOutput> out2(2);
  EXPECT_THROW(model_->forward(twice, out2), core::Error);
  EXPECT_EQ(st->length(), 10);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4

namespace dsinfer::model::deepseek_v4 {
namespace {

// The other numerics keep the chunk / batch semantics (their extra roundings are row-local too).
TEST(V4Numerics, ReferenceAndNoQdqModesAreChunkInvariantAndDiffer) {
  const std::string dir = testing::make_test_model("tiny512", testing::tiny_config());
  const int64_t T = 120;
  const auto tokens = random_tokens(T, 512, 30);
  std::vector<std::vector<float>> per_mode;
  for (int mode = 0; mode < 3; ++mode) {
    ModelOptions opt;
    opt.threads = 2;
    opt.numerics.mode = mode == 1 ? NumericsMode::kReference : NumericsMode::kExact;
    opt.numerics.kv_qdq = mode != 2;
    auto m = Model::load(dir, opt);
    auto a = m->new_sequence();
    const auto one = run_chunks(*m, *a, tokens, 0, T, {T});
    auto b = m->new_sequence();
    EXPECT_EQ(first_difference(one, run_chunks(*m, *b, tokens, 0, T, {1, 9, 31})), -1) << "mode " << mode;
    for (float v : one) ASSERT_TRUE(std::isfinite(v));
    per_mode.push_back(one);
  }
  EXPECT_NE(first_difference(per_mode[0], per_mode[1]), -1);
  EXPECT_NE(first_difference(per_mode[0], per_mode[2]), -1);
  // The first position sees no quantised KV but its own, so exact and no-QDQ stay close there.
  double num = 0, den = 0;
  for (int v = 0; v < 512; ++v) {
    num += std::pow(per_mode[0][v] - per_mode[2][v], 2);
    den += std::pow(per_mode[2][v], 2);
  }
  EXPECT_LT(std::sqrt(num / den), 0.1);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
