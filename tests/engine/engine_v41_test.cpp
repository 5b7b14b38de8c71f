// The engine over a tiny DeepSeek-V4.1 checkpoint (mkmodel, tests/engine/tiny_v41.json: vocabulary
// 512, window 8, ratio-2 and ratio-1 kv sources, Engram, DSpark taps): the shared suite
// (engine_model_tests.h: layout, outputs against a plain decode loop over deepseek_v41::Sequence with
// chunked prefill, batch invariance, seeded sampling, lossless speculation with DSpark, preemption) and
// what is V4.1's own: the runner's logits against the one-pass deepseek_v41 prefill, the DSpark draft
// head, exact resume from the prefix cache and exact replay, block adoption, the KV store's block
// bytes and the sequence hand-over bytes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>

#include "core/error.h"
#include "engine/deepseek_v4/v4_runner.h"
#include "engine/deepseek_v41/v41_runner.h"
#include "engine/deepseek_v41/v41_state_codec.h"
#include "engine/engine.h"
#include "engine/kv_connector.h"
#include "engine/sampler.h"
#include "engine_model_tests.h"
#include "engine_test_util.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/prefill.h"
#include "model/mkmodel.h"

namespace dsinfer::engine::testing {
namespace {

namespace v41 = model::deepseek_v41;

class EngineV41 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(
        (std::filesystem::temp_directory_path() / ("dsinfer-engine-v41-test-" + std::to_string(::getpid()))).string());
    model::MkModelOptions o;
    o.config_path = std::string(DSINFER_SOURCE_DIR) + "/tests/engine/tiny_v41.json";
    o.seed = 1;
    o.out_dir = *dir_;
    model::make_model(o);
    runner_ = new std::shared_ptr<ModelRunner>(open_model(*dir_));  // the registry picks the V4.1 adapter
    ck_ = model::Checkpoint::open(*dir_).release();
    map_ = new v41::EngramTokenMap(v41::load_engram_token_map(*dir_, ck_->config()));
  }
  static void TearDownTestSuite() {
    delete map_;
    delete ck_;
    delete runner_;
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::shared_ptr<ModelRunner> runner() { return *runner_; }
  static int64_t vocab() { return ck_->config().vocab_size; }

  // The plain loop: the prompt in one pass, then one token per forward, tokens drawn with the
  // engine's sampler and the request's stream at each position.
  static Outcome reference(const RequestSpec& spec) {
    v41::Sequence seq(*ck_, map_, {});
    std::vector<float> logits = seq.forward(spec.prompt_ids, 1);
    TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
    Outcome o;
    int64_t pos = static_cast<int64_t>(spec.prompt_ids.size());
    for (int32_t i = 0; i < spec.max_tokens; ++i, ++pos) {
      const int32_t t = sample_token(logits, spec.sampling, stream, pos);
      o.tokens.push_back(t);
      if (i + 1 == spec.max_tokens) break;
      logits = seq.forward({t}, 1);
    }
    o.finish = FinishReason::kLength;
    return o;
  }

  static std::vector<int32_t> prompt(std::mt19937& rng, int n) {
    std::vector<int32_t> p(n);
    for (auto& t : p) t = 3 + static_cast<int32_t>(rng() % 500);
    return p;
  }


  // Feeds tokens to a runner sequence; the logits of the last `rows` tokens.
  static std::vector<float> feed(SequenceState& seq, std::span<const int32_t> tokens, int32_t rows) {
    return feed_on(runner(), seq, tokens, rows);
  }
  static std::vector<float> feed_on(const std::shared_ptr<ModelRunner>& r, SequenceState& seq,
                                    std::span<const int32_t> tokens, int32_t rows) {
    std::vector<float> logits;
    ForwardItem item;
    item.seq = &seq;
    item.tokens = tokens;
    item.logit_rows = rows;
    r->forward({&item, 1}, logits);
    return logits;
  }
  static const std::string& dir() { return *dir_; }
  static const model::Checkpoint& ck() { return *ck_; }
  static const v41::EngramTokenMap* map() { return map_; }

  // Per position (tiny_v41.json): 10 layers' window KV (128 floats), 3 DSpark taps of 128, the token id
  // and its Engram compressed id; kv sources 2, 4 (ratio 2) keep inputs and gates of the even positions
  // (64 per block), 6, 8 (ratio 1) none.
  static void expect_model_layout(const ModelInfo& i) {
    EXPECT_TRUE(i.supports_replay);
    const int64_t per_block = 128 * (10 * 128 + 3 * 128) * 4 + 2 * 64 * (2 * 128) * 4 + 128 * (4 + 8) +
                              2 * 64 * (128 + 64) * 4 + 2 * 128 * (128 + 64) * 4;
    EXPECT_GE(i.block_bytes, per_block);
    EXPECT_LT(i.block_bytes, per_block + 1024);
    EXPECT_EQ(v41::state_range_bytes(ck_->config(), 128), per_block);
  }

  // Below the decoder's reach of the test config (2 decoder layers x (window 8 - 1) + 1 = 15).
  static constexpr int32_t kApproximate = 6;

  static EngineOptions replaying(int32_t k) {
    EngineOptions o;
    o.decoder_replay_tokens = k;
    return o;
  }

  // The model-level replay: the prompt in one pass with decoder replay of K, then the engine's own
  // tokens fed one by one (teacher-forced); each must be the token drawn from the row before it, and
  // with top_logprobs the row's logprobs bitwise the engine's (a differently placed replay start
  // changes the rows even where the tokens survive).
  static void expect_replayed_forward(const RequestSpec& spec, const Outcome& out, int64_t k) {
    const std::vector<int32_t>& got = out.tokens;
    v41::PrefillOptions opt;
    opt.decoder_replay_tokens = k;
    v41::Sequence seq(*ck_, map_, opt);
    std::vector<float> logits = seq.forward(spec.prompt_ids, 1);
    const int64_t n = static_cast<int64_t>(spec.prompt_ids.size());
    EXPECT_EQ(seq.decoder_replay_start(), n > k ? n - k : -1);
    ASSERT_EQ(got.size(), static_cast<size_t>(spec.max_tokens));
    TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(sample_token(logits, spec.sampling, stream, n + static_cast<int64_t>(i)), got[i])
          << "token " << i << " of a prompt of " << n;
      if (spec.sampling.top_logprobs >= 0) {
        ASSERT_EQ(out.logprobs.size(), got.size());
        const TokenLogprobs want = token_logprobs(logits, got[i], spec.sampling.top_logprobs);
        ASSERT_EQ(out.logprobs[i].logprob, want.logprob) << "token " << i << " of a prompt of " << n;
        ASSERT_EQ(out.logprobs[i].top.size(), want.top.size());
        for (size_t j = 0; j < want.top.size(); ++j) {
          ASSERT_EQ(out.logprobs[i].top[j].token, want.top[j].token);
          ASSERT_EQ(out.logprobs[i].top[j].logprob, want.top[j].logprob);
        }
      }
      if (i + 1 < got.size()) logits = seq.forward({got[i]}, 1);
    }
  }

  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  static const EngineModelCases& cases() {
    static const EngineModelCases c{
        .name = "V4.1",
        .layout = {.vocab_size = 512, .window = 8, .max_draft_tokens = 5 /* dspark_block_size */,
                   .identity_prefix = "deepseek_v41:"},
        .concurrent = {.seed = 2, .long_prompt = 200, .tokens = {10, 8, 6, 12}, .budget = 64},
        .batch = {.seed = 3, .requests = 5, .max_prompt = 180, .min_tokens = 4, .budgets = {48, 1024},
                  .serial_budget = -1},
        // The DSpark drafter.
        .speculation = {.seed = 11, .prompts = {20, 150, 60}, .tokens = {16, 12, 14}, .draft_tokens = {1, 4},
                        .repeat = 1, .repeat_cached = 128},
        // Room for about one and a half requests of 140 positions; replay is exact on V4.1.
        .preemption = {.seed = 5, .requests = 3, .prompt = 100, .tokens = 40, .sampled_temperature = 0.7f,
                       .fitting = 1, .blocks = 2, .swa_replay = true},
    };
    return c;
  }

  static std::string* dir_;
  static std::shared_ptr<ModelRunner>* runner_;
  static model::Checkpoint* ck_;
  static v41::EngramTokenMap* map_;
};

std::string* EngineV41::dir_ = nullptr;
std::shared_ptr<ModelRunner>* EngineV41::runner_ = nullptr;
model::Checkpoint* EngineV41::ck_ = nullptr;
v41::EngramTokenMap* EngineV41::map_ = nullptr;

INSTANTIATE_TYPED_TEST_SUITE_P(EngineV41, EngineModel, EngineV41);

// The fixture's helpers for the free functions that run on any runner.
struct EngineV41Access : EngineV41 {
  using EngineV41::ck;
  using EngineV41::dir;
  using EngineV41::feed_on;
  using EngineV41::map;
  using EngineV41::prompt;
  using EngineV41::vocab;
};

// The runner's first draft after position p, anchored on token p+1, is the argmax of the teacher-forced
// DSpark draft 0 row p (prefill_logits); the round leaves the sequence as it was.
TEST_F(EngineV41, DraftIsTheTeacherForcedDraftHead) {
  std::mt19937 rng(10);
  const auto ids = prompt(rng, 40);
  std::vector<float> draft0;
  const std::vector<float> full = v41::prefill_logits(*ck_, map_, ids, {}, &draft0);
  const int64_t V = vocab();
  ASSERT_EQ(draft0.size(), static_cast<size_t>(39 * V));
  auto seq = runner()->new_sequence();
  int64_t fed = 0;
  for (int64_t p : {0, 7, 8, 20, 38}) {
    feed(*seq, std::span<const int32_t>(ids.data() + fed, static_cast<size_t>(p + 1 - fed)), 0);
    fed = p + 1;
    const float* row = draft0.data() + p * V;
    const int32_t want = static_cast<int32_t>(std::max_element(row, row + V) - row);
    DraftItem item;
    item.seq = seq.get();
    item.last_token = ids[p + 1];
    item.count = 3;
    const std::vector<int32_t> d = runner()->draft({&item, 1});
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d[0], want) << "position " << p;
    for (int32_t t : d) EXPECT_TRUE(t >= 0 && t < V);
  }
  // Untouched by the rounds: the next rows are still the one-pass rows.
  const auto last = feed(*seq, std::span<const int32_t>(ids.data() + 39, 1), 1);
  for (int64_t c = 0; c < V; ++c) ASSERT_EQ(last[c], full[39 * V + c]);
}

// The runner's rows, fed in uneven chunks and token by token with a rollback, are bitwise the
// one-pass prefill's.
// The runner over chunks, decode tokens and rollbacks gives bitwise the one-pass logits of the same
// numerics (fast: the model's PrefillOptions::fast).
void expect_one_pass_logits(const std::shared_ptr<ModelRunner>& r, bool fast);
// One runner step over several sequences gives each item's rows bitwise as that sequence fed alone.
void expect_batched_step_is_each_alone(const std::shared_ptr<ModelRunner>& r);

TEST_F(EngineV41, RunnerLogitsAreTheOnePassLogits) { expect_one_pass_logits(runner(), false); }

// --numerics fast (int8 routed experts, bf16 head): row-local, so the chunk, rollback and batch
// invariance hold bitwise as in exact; its logits are not the exact ones (the fast products ran).
TEST_F(EngineV41, FastNumericsKeepChunkAndBatchInvariance) {
  V4RunnerOptions o;
  o.model.numerics.mode = model::deepseek_v4::NumericsMode::kFast;
  const std::shared_ptr<ModelRunner> fast = open_model(dir(), o);
  EXPECT_NE(fast->info().identity.find("numerics fast"), std::string::npos) << fast->info().identity;
  EXPECT_NE(fast->info().identity, runner()->info().identity);  // a prefix cache must not mix the numerics
  expect_one_pass_logits(fast, true);
  expect_batched_step_is_each_alone(fast);
  std::mt19937 rng(3);
  const auto ids = prompt(rng, 20);
  auto a = fast->new_sequence(), b = runner()->new_sequence();
  EXPECT_NE(feed_on(fast, *a, ids, 1), feed_on(runner(), *b, ids, 1));
}

void expect_one_pass_logits(const std::shared_ptr<ModelRunner>& r, bool fast) {
  using T = EngineV41Access;
  std::mt19937 rng(1);
  const auto ids = T::prompt(rng, 150);
  v41::PrefillOptions po;
  po.fast = fast;
  const std::vector<float> full = v41::prefill_logits(T::ck(), T::map(), ids, po);
  const int64_t V = T::vocab();
  auto seq = r->new_sequence();
  std::vector<float> got;
  size_t at = 0;
  for (size_t n : {70, 1, 1, 40, 38}) {
    const std::span<const int32_t> part(ids.data() + at, n);
    const auto rows = T::feed_on(r, *seq, part, static_cast<int32_t>(n));
    got.insert(got.end(), rows.begin(), rows.end());
    at += n;
    if (n == 1) {  // a rollback after a rejected draft: two junk tokens fed and undone
      const std::vector<int32_t> junk = {5, 6};
      T::feed_on(r, *seq, junk, 2);
      r->truncate(*seq, static_cast<int64_t>(at));
    }
  }
  ASSERT_EQ(at, ids.size());
  ASSERT_EQ(got.size(), full.size());
  for (size_t i = 0; i < full.size(); ++i) ASSERT_EQ(got[i], full[i]) << "row " << i / V;
  // logit_rows = 1 gives the last row alone, bitwise.
  auto one = r->new_sequence();
  const auto last = T::feed_on(r, *one, ids, 1);
  ASSERT_EQ(last.size(), static_cast<size_t>(V));
  for (int64_t c = 0; c < V; ++c) ASSERT_EQ(last[c], full[(ids.size() - 1) * V + c]);
}

// One runner step over several sequences (a prefill, a continued chunk, decode tokens, an item with
// no logit rows) gives each item's rows bitwise as that sequence fed alone, and the sequences
// continue alike.
TEST_F(EngineV41, BatchedStepIsEachItemAlone) { expect_batched_step_is_each_alone(runner()); }

void expect_batched_step_is_each_alone(const std::shared_ptr<ModelRunner>& r) {
  using T = EngineV41Access;
  const auto prompt = T::prompt;
  const auto feed = [&](SequenceState& seq, std::span<const int32_t> tokens, int32_t rows) {
    return T::feed_on(r, seq, tokens, rows);
  };
  std::mt19937 rng(7);
  const std::vector<std::vector<int32_t>> ids = {prompt(rng, 60), prompt(rng, 60), prompt(rng, 60), prompt(rng, 60)};
  const std::vector<size_t> before = {0, 30, 50, 12};  // fed alone before the batched step
  const std::vector<size_t> now = {45, 9, 1, 3};
  const std::vector<int32_t> rows = {45, 2, 1, 0};
  std::vector<std::unique_ptr<SequenceState>> batched, alone;
  for (size_t k = 0; k < ids.size(); ++k) {
    batched.push_back(r->new_sequence());
    alone.push_back(r->new_sequence());
    if (before[k] == 0) continue;
    feed(*batched[k], std::span<const int32_t>(ids[k].data(), before[k]), 0);
    feed(*alone[k], std::span<const int32_t>(ids[k].data(), before[k]), 0);
  }
  std::vector<ForwardItem> items;
  for (size_t k = 0; k < ids.size(); ++k) {
    items.push_back({batched[k].get(), std::span<const int32_t>(ids[k].data() + before[k], now[k]), rows[k]});
  }
  std::vector<float> got;
  r->forward(items, got);
  std::vector<float> want;
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto r = feed(*alone[k], std::span<const int32_t>(ids[k].data() + before[k], now[k]), rows[k]);
    want.insert(want.end(), r.begin(), r.end());
  }
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(want.size(), static_cast<size_t>((45 + 2 + 1) * T::vocab()));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "row " << i / T::vocab();
  // The next token of each, alone, from the states the batched step left.
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::span<const int32_t> next(ids[k].data() + before[k] + now[k], 1);
    const auto a = feed(*batched[k], next, 1), b = feed(*alone[k], next, 1);
    ASSERT_EQ(a, b) << "sequence " << k;
  }
}

// A request sharing a 200-token prefix with an earlier one resumes at 128 from the cache, exactly.
TEST_F(EngineV41, PrefixCacheHitIsBitwiseTheColdRun) {
  std::mt19937 rng(4);
  const auto shared = prompt(rng, 200);
  auto first = shared, second = shared;
  const auto ta = prompt(rng, 20), tb = prompt(rng, 30);
  first.insert(first.end(), ta.begin(), ta.end());
  second.insert(second.end(), tb.begin(), tb.end());
  for (float temperature : {0.0f, 1.0f}) {
    EngineOptions o;
    auto engine = make_engine(runner(), o);
    auto a = run_all(*engine, {fixed_length_spec(first, 2)});
    ASSERT_EQ(a.size(), 1u);
    const RequestSpec s = fixed_length_spec(second, 10, temperature, 21);
    auto warm = run_all(*engine, {s});
    ASSERT_EQ(warm.size(), 1u);
    EXPECT_EQ(warm[0].cached, 128);
    EXPECT_EQ(warm[0].tokens, reference(s).tokens) << "temperature " << temperature;
    // A repeat of the same prompt resumes at its last boundary, exactly too.
    auto again = run_all(*engine, {s});
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].cached, 128);
    EXPECT_EQ(again[0].tokens, warm[0].tokens);
  }
}

// A hit without a snapshot at its node takes the replay path, which on V4.1 is exact: the blocks are
// attached and the window recomputed, bit for bit (engine and runner).
TEST_F(EngineV41, ReplayWithoutASnapshotIsExact) {
  std::mt19937 rng(12);
  const auto shared = prompt(rng, 384);  // three blocks; the first request keeps no snapshot at 384
  auto a_prompt = shared, b_prompt = shared;
  const auto ta = prompt(rng, 200), tb = prompt(rng, 60);
  a_prompt.insert(a_prompt.end(), ta.begin(), ta.end());
  b_prompt.insert(b_prompt.end(), tb.begin(), tb.end());
  EngineOptions o;
  auto engine = make_engine(runner(), o);
  ASSERT_EQ(run_all(*engine, {fixed_length_spec(a_prompt, 2)}).size(), 1u);
  const RequestSpec b = fixed_length_spec(b_prompt, 10);
  auto out = run_all(*engine, {b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cached, 384 - 8);  // window 8 recomputed
  EXPECT_EQ(engine->metrics().extra.at("prefix_cache_replay_hits_total"), 1);
  EXPECT_EQ(out[0].tokens, reference(b).tokens);

  auto cold = runner()->new_sequence();
  const auto want = feed(*cold, b_prompt, 1);
  std::vector<std::shared_ptr<const KvBlock>> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(runner()->block(*cold, i));
  auto replayed = runner()->new_sequence();
  runner()->attach(*replayed, blocks, nullptr);
  ASSERT_EQ(replayed->length(), 384 - 8);
  const auto got = feed(*replayed, std::span<const int32_t>(b_prompt.data() + 376, b_prompt.size() - 376), 1);
  EXPECT_EQ(got, want);
}

// Two identical prompts computed at once: the later one adopts the cached block (bitwise its own), so
// it keeps publishing; a block of other tokens is refused.
TEST_F(EngineV41, AdoptsOnlyABitwiseIdenticalBlock) {
  std::mt19937 rng(13);
  const RequestSpec s = fixed_length_spec(prompt(rng, 200), 4);
  auto cold = runner()->new_sequence();
  feed(*cold, s.prompt_ids, 0);
  auto other = runner()->new_sequence();
  feed(*other, s.prompt_ids, 0);
  EXPECT_TRUE(runner()->adopt_block(*other, 0, runner()->block(*cold, 0)));
  auto different = runner()->new_sequence();
  auto p2 = s.prompt_ids;
  p2[5] ^= 1;
  feed(*different, p2, 0);
  EXPECT_FALSE(runner()->adopt_block(*different, 0, runner()->block(*cold, 0)));
}

// Block bytes rebuild the block exactly (a sequence attached to imported blocks continues bitwise);
// corrupted, truncated or misplaced bytes are refused.
TEST_F(EngineV41, BlockBytesRoundTripAndCorruptionIsRefused) {
  std::mt19937 rng(6);
  const auto ids = prompt(rng, 300);
  auto cold = runner()->new_sequence();
  const auto want = feed(*cold, ids, 1);
  std::vector<std::vector<uint8_t>> bytes;
  for (int64_t b = 0; b < 2; ++b) bytes.push_back(runner()->export_block(*runner()->block(*cold, b)));
  ASSERT_FALSE(bytes[0].empty());
  std::vector<std::shared_ptr<const KvBlock>> blocks;
  for (int64_t b = 0; b < 2; ++b) blocks.push_back(runner()->import_block(b, bytes[b]));
  auto warm = runner()->new_sequence();
  struct At256 final : WindowSnapshot {
    int64_t position() const override { return 256; }
    int64_t bytes() const override { return 0; }
  };
  // The runner's own snapshot type is required.
  At256 foreign;
  EXPECT_THROW(runner()->attach(*warm, blocks, &foreign), core::Error);
  auto src = runner()->new_sequence();
  feed(*src, std::span<const int32_t>(ids.data(), 256), 0);
  const auto at256 = runner()->snapshot(*src);
  runner()->attach(*warm, blocks, at256.get());
  ASSERT_EQ(warm->length(), 256);
  const auto got = feed(*warm, std::span<const int32_t>(ids.data() + 256, ids.size() - 256), 1);
  ASSERT_EQ(got, want);

  auto flipped = bytes[1];
  flipped[flipped.size() / 2] ^= 0x10;
  EXPECT_THROW(runner()->import_block(1, flipped), core::Error);
  auto cut = bytes[1];
  cut.resize(cut.size() - 5);
  EXPECT_THROW(runner()->import_block(1, cut), core::Error);
  EXPECT_THROW(runner()->import_block(0, bytes[1]), core::Error);  // block 1's bytes asked as block 0
  auto bad_magic = bytes[0];
  bad_magic[0] ^= 1;
  EXPECT_THROW(runner()->import_block(0, bad_magic), core::Error);
  auto version1 = bytes[0];  // the version after the magic: 1 held every position's compressor inputs
  version1[8] = 1;
  try {
    runner()->import_block(0, version1);
    ADD_FAILURE() << "version 1 bytes accepted";
  } catch (const core::Error& e) {
    EXPECT_NE(std::string(e.what()).find("version 1"), std::string::npos) << e.what();
  }
}

// Bytes that pass the checksum are still checked: a range of another shape or another layout is refused.
TEST_F(EngineV41, WellFramedBytesOfAnotherShapeOrLayoutAreRefused) {
  std::mt19937 rng(14);
  v41::Sequence seq(*ck_, map_, {});
  seq.forward(prompt(rng, 130), 0);
  const v41::StateRange good = seq.export_range(0, 128);
  const std::string& layout = runner()->info().cache_layout;
  EXPECT_NE(runner()->import_block(0, encode_v41_state(good, V41StateKind::kBlock, layout, 0)), nullptr);
  v41::StateRange fewer_layers = good;
  fewer_layers.windows.pop_back();
  EXPECT_THROW(runner()->import_block(0, encode_v41_state(fewer_layers, V41StateKind::kBlock, layout, 0)), core::Error);
  v41::StateRange short_keys = good;
  short_keys.sources[0].ik.resize(short_keys.sources[0].ik.size() - 1);
  EXPECT_THROW(runner()->import_block(0, encode_v41_state(short_keys, V41StateKind::kBlock, layout, 0)), core::Error);
  EXPECT_THROW(runner()->import_block(0, encode_v41_state(good, V41StateKind::kBlock, layout + "; other", 0)),
               core::Error);
  EXPECT_THROW(runner()->import_block(0, encode_v41_state(good, V41StateKind::kSequence, layout, 0)), core::Error);
  // A range that starts inside a ratio-2 group cannot be cut from a sequence.
  EXPECT_THROW(seq.export_range(1, 128), core::Error);
}

// The whole state at an odd length (an open ratio-2 group) moves to a new sequence, which continues
// bitwise (disaggregated prefill / decode).
TEST_F(EngineV41, SequenceBytesContinueExactly) {
  std::mt19937 rng(7);
  const auto ids = prompt(rng, 161);
  auto a = runner()->new_sequence();
  feed(*a, std::span<const int32_t>(ids.data(), 131), 0);
  const auto bytes = runner()->export_sequence(*a);
  ASSERT_FALSE(bytes.empty());
  auto b = runner()->import_sequence(bytes);
  ASSERT_EQ(b->length(), 131);
  const std::span<const int32_t> rest(ids.data() + 131, 30);
  EXPECT_EQ(feed(*b, rest, 30), feed(*a, rest, 30));
  auto bad = bytes;
  bad.back() ^= 1;
  EXPECT_THROW(runner()->import_sequence(bad), core::Error);
}

// ---- Decoder-side bounded replay in the engine (EngineOptions::decoder_replay_tokens) ----------

// Counts the blocks the engine saves; every load is a miss.
class CountingConnector final : public KvConnector {
 public:
  void save_block(const KvBlockName&, std::vector<uint8_t>, const std::string&) override { ++saved; }
  void load(std::vector<KvBlockName> blocks, KvLoadCallback done) override {
    for (size_t i = 0; i < blocks.size(); ++i) done(i, false, {});
  }
  void save_snapshot(uint64_t, std::shared_ptr<const WindowSnapshot>) override {}
  std::shared_ptr<const WindowSnapshot> find_snapshot(uint64_t) override { return nullptr; }
  std::atomic<int64_t> saved{0};
};


// Prompts fed in chunks by a small step budget (150: 64 + 64 + the replay of 22; 132: the replay must
// start at 125, not at the cache's snapshot stop 128, which would leave 4 tokens), in one chunk (40), or
// shorter than K (5, exact), greedy and sampled, with and without speculation (its rollbacks stay
// above the replay start): each request's tokens are the model-level replayed forward's.
TEST_F(EngineV41, DecoderReplayOutputsAreTheModelsReplayedForward) {
  std::mt19937 rng(21);
  std::vector<RequestSpec> specs;
  for (int n : {150, 132, 40, 5}) {
    specs.push_back(fixed_length_spec(prompt(rng, n), 12, n == 40 ? 0.8f : 0.0f, 3));
    specs.back().sampling.top_logprobs = 3;
  }
  bool differs_from_exact = false;
  for (bool speculation : {false, true}) {
    EngineOptions o = replaying(kApproximate);
    o.max_batch_tokens = 64;
    o.speculation = speculation;
    o.draft_tokens = 3;
    auto engine = make_engine(runner(), o);
    const auto out = run_all(*engine, specs);
    ASSERT_EQ(out.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSERT_EQ(out[i].finish, FinishReason::kLength) << out[i].error;
      expect_replayed_forward(specs[i], out[i], kApproximate);
      differs_from_exact |= out[i].tokens != reference(specs[i]).tokens;
    }
    EXPECT_GE(engine->metrics().extra.at("decoder_replays_total"), 3);
    EXPECT_EQ(engine->metrics().extra.at("prefix_cache_blocks"), 0);
  }
  EXPECT_TRUE(differs_from_exact) << "K = 6 is below the decoder's reach: some output should differ from exact";
}

// K at the decoder's reach: the replayed rows are the exact ones, so the outputs are the exact engine's.
TEST_F(EngineV41, DecoderReplayCoveringTheDecodersReachIsExact) {
  std::mt19937 rng(22);
  std::vector<RequestSpec> specs;
  for (int n : {150, 40}) specs.push_back(fixed_length_spec(prompt(rng, n), 10));
  EngineOptions o = replaying(15);
  o.max_batch_tokens = 64;
  auto engine = make_engine(runner(), o);
  const auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(out[i].tokens, reference(specs[i]).tokens) << i;
  EXPECT_GE(engine->metrics().extra.at("decoder_replays_total"), 2);
}

// A replayed request publishes no block to the prefix cache or the KV store (a repeat finds nothing);
// the same engine without the option publishes both blocks, and a request that exports its state
// (a disaggregated prefill) runs exactly under the option, so it publishes and exports.
TEST_F(EngineV41, DecoderReplayPublishesNoBlock) {
  std::mt19937 rng(23);
  const RequestSpec s = fixed_length_spec(prompt(rng, 300), 3);
  for (int32_t k : {kApproximate, 0}) {
    auto store = std::make_shared<CountingConnector>();
    EngineOptions o = replaying(k);
    o.kv_connector = store;
    auto engine = make_engine(runner(), o);
    const auto first = run_all(*engine, {s});
    ASSERT_EQ(first.size(), 1u);
    const auto again = run_all(*engine, {s});
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].tokens, first[0].tokens);
    const auto m = engine->metrics();
    if (k > 0) {
      expect_replayed_forward(s, first[0], k);
      EXPECT_EQ(m.extra.at("prefix_cache_blocks"), 0);
      EXPECT_EQ(store->saved.load(), 0);
      EXPECT_EQ(again[0].cached, 0);
    } else {
      EXPECT_EQ(m.extra.at("prefix_cache_blocks"), 2);
      EXPECT_EQ(store->saved.load(), 2);
      EXPECT_EQ(again[0].cached, 256);
    }
  }
  auto engine = make_engine(runner(), replaying(kApproximate));
  RequestSpec e = s;
  e.export_state = true;
  std::mutex mu;
  std::condition_variable cv;
  TokenEvent last;
  std::vector<int32_t> tokens;
  bool done = false;
  ASSERT_EQ(engine->submit(e, [&](const TokenEvent& ev) {
                  std::lock_guard<std::mutex> lock(mu);
                  tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
                  if (ev.finish == FinishReason::kNone) return;
                  last = ev;
                  done = true;
                  cv.notify_all();
                }).status,
            SubmitStatus::kAccepted);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  EXPECT_EQ(last.finish, FinishReason::kLength) << last.error;
  ASSERT_NE(last.exported_state, nullptr);
  EXPECT_FALSE(last.exported_state->empty());
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0], reference(s).tokens[0]);
  EXPECT_EQ(engine->metrics().extra.at("decoder_replays_total"), 0);
  EXPECT_EQ(engine->metrics().extra.at("prefix_cache_blocks"), 2);
  // Those blocks serve a replayed request, but its hit leaves K + 1 prompt tokens to feed: of a prompt of
  // 260 not the snapshot at 256 (4 left) but block 0, resumed at 120 by the (exact) window replay; the
  // prompt still ends in the one-pass replay.
  RequestSpec shorter = fixed_length_spec(std::vector<int32_t>(s.prompt_ids.begin(), s.prompt_ids.begin() + 260), 6);
  shorter.sampling.top_logprobs = 2;
  const auto hit = run_all(*engine, {shorter});
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0].cached, 120);
  expect_replayed_forward(shorter, hit[0], kApproximate);
}

// Under a budget that preempts, a replayed request is recomputed (its prompt replayed again, its
// output fed in chunks of at most K) and goes on as if never interrupted.
TEST_F(EngineV41, DecoderReplayPreemptedRequestsFinishAsUninterrupted) {
  std::mt19937 rng(24);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 3; ++i) {
    specs.push_back(fixed_length_spec(prompt(rng, 100), 40, i == 1 ? 0.7f : 0.0f, 5));
    specs.back().sampling.top_logprobs = 2;
  }
  const ModelInfo& info = runner()->info();
  EngineOptions o = replaying(kApproximate);
  o.kv_budget_bytes = info.sequence_bytes + 2 * info.block_bytes + info.snapshot_bytes + info.block_bytes;
  auto engine = make_engine(runner(), o);
  const auto out = run_all(*engine, specs);
  ASSERT_EQ(out.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(out[i].finish, FinishReason::kLength) << out[i].error;
    expect_replayed_forward(specs[i], out[i], kApproximate);
  }
  EXPECT_GT(engine->metrics().preempted_total, 0);
}

// What cannot be combined is refused when the engine is made, saying why.
TEST_F(EngineV41, DecoderReplayRefusesWhatCannotReplay) {
  EXPECT_TRUE(runner()->info().supports_decoder_replay);
  EngineOptions o = replaying(64);
  o.max_batch_tokens = 64;  // the replayed chunk holds K + 1 tokens or more
  std::string msg = error_of([&] { make_engine(runner(), o); });
  EXPECT_NE(msg.find("max_batch_tokens"), std::string::npos) << msg;
  msg = error_of([&] { make_engine(runner(), replaying(-1)); });
  EXPECT_NE(msg.find("must be >= 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dsinfer::engine::testing
