// Speculation on the real tiny DeepSeek-V4 model with acceptance forced. mkmodel's random MTP weights
// almost never propose the model's own next token, so the other tests only see rejections. Here a
// wrapping runner lets the real MTP drafter run (its state advances exactly as in production) and then
// replaces its proposals with the plain greedy loop's own next tokens, wrong from a chosen index on:
// chained drafts (k = 1..3) are accepted fully, partly or not at all, and the kept / rolled-back
// positions must leave the output bitwise equal to non-speculative greedy decoding. (It can fail: with
// the wrapper's truncate() made a no-op, the outputs leave the greedy path at the first rejection.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <random>

#include <unistd.h>

#include "engine/deepseek_v4/v4_runner.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "engine_test_util.h"
#include "model/deepseek_v4/model.h"
#include "model/mkmodel.h"
#include "tiny_v4_checkpoint.h"

namespace dsinfer::engine::testing {
namespace {

namespace v4 = model::deepseek_v4;

// Delegates everything to the real runner; draft() calls the real drafter, then substitutes the
// oracle's tokens (the greedy continuation) with the draft at index reject_at[call % size] and later
// made wrong. Counts what the engine must therefore accept.
class ForcedDraftRunner : public ModelRunner {
 public:
  ForcedDraftRunner(std::shared_ptr<ModelRunner> inner, std::vector<int32_t> oracle, std::vector<int32_t> reject_at)
      : inner_(std::move(inner)), oracle_(std::move(oracle)), reject_at_(std::move(reject_at)) {}

  const ModelInfo& info() const override { return inner_->info(); }
  core::ThreadPool& pool() override { return inner_->pool(); }
  void prepare(bool speculation, bool batch_invariant) override { inner_->prepare(speculation, batch_invariant); }
  std::unique_ptr<SequenceState> new_sequence() override { return inner_->new_sequence(); }
  void forward(std::span<const ForwardItem> items, std::vector<float>& logits) override {
    inner_->forward(items, logits);
  }
  void truncate(SequenceState& seq, int64_t length) override { inner_->truncate(seq, length); }
  std::shared_ptr<const KvBlock> block(const SequenceState& seq, int64_t index) override {
    return inner_->block(seq, index);
  }
  bool adopt_block(SequenceState& seq, int64_t index, const std::shared_ptr<const KvBlock>& shared) override {
    return inner_->adopt_block(seq, index, shared);
  }
  std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& seq) override { return inner_->snapshot(seq); }
  void attach(SequenceState& seq, std::span<const std::shared_ptr<const KvBlock>> blocks,
              const WindowSnapshot* snapshot) override {
    inner_->attach(seq, blocks, snapshot);
  }

  std::vector<int32_t> draft(std::span<const DraftItem> items) override {
    std::vector<int32_t> out = inner_->draft(items);
    EXPECT_EQ(items.size(), 1u) << "one request at a time: the oracle belongs to it";
    size_t o = 0;
    for (const DraftItem& d : items) {
      const int64_t p = d.seq->length();  // position of last_token; drafts are for p+1 .. p+count
      EXPECT_EQ(oracle_.at(p), d.last_token) << "the sequence left the greedy path at " << p;
      const int32_t wrong_from = reject_at_[calls_ % reject_at_.size()];
      ++calls_;
      for (int32_t j = 0; j < d.count; ++j, ++o) {
        const int64_t q = p + 1 + j;
        const int32_t right = q < static_cast<int64_t>(oracle_.size()) ? oracle_[q] : 2;
        out[o] = j < wrong_from ? right : 2 + (right - 1) % (info().vocab_size - 2);  // != right
      }
      expected_accepted_ += std::min(wrong_from, d.count);
      drafted_ += d.count;
      if (wrong_from > 0 && wrong_from < d.count) ++partial_;
    }
    return out;
  }

  int64_t expected_accepted() const { return expected_accepted_; }
  int64_t drafted() const { return drafted_; }
  int64_t partial() const { return partial_; }

 private:
  std::shared_ptr<ModelRunner> inner_;
  std::vector<int32_t> oracle_;
  std::vector<int32_t> reject_at_;
  std::atomic<int64_t> calls_{0}, expected_accepted_{0}, drafted_{0}, partial_{0};
};

class SpeculationV4 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    checkpoint_ = new TinyV4Checkpoint("dsinfer-speculation-v4-test");
    plain_ = v4::Model::load(checkpoint_->dir()).release();
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete checkpoint_;
  }

  // The plain greedy loop over model/deepseek_v4: prompt in one pass, then one token per forward.
  static std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int max_tokens) {
    auto seq = plain_->new_sequence();
    std::vector<v4::SequenceOutput> out(1);
    v4::SequenceInput in;
    in.state = seq.get();
    in.tokens = prompt;
    in.logits = v4::LogitRows::kLast;
    plain_->forward({&in, 1}, out);
    std::vector<int32_t> tokens;
    for (int i = 0; i < max_tokens; ++i) {
      tokens.push_back(argmax(out[0].logits));
      if (i + 1 == max_tokens) break;
      in.tokens = std::span<const int32_t>(&tokens.back(), 1);
      plain_->forward({&in, 1}, out);
    }
    return tokens;
  }

  static TinyV4Checkpoint* checkpoint_;
  static v4::Model* plain_;
};

TinyV4Checkpoint* SpeculationV4::checkpoint_ = nullptr;
v4::Model* SpeculationV4::plain_ = nullptr;

TEST_F(SpeculationV4, ForcedAcceptanceKeepsGreedyOutputBitwise) {
  std::mt19937 rng(21);
  struct Case {
    int prompt_len, max_tokens;
  };
  // 120 + 30 crosses the first 128-block boundary inside accepted drafts; 40 wraps the window (32).
  const Case cases[] = {{40, 30}, {120, 30}};
  // Index of the first wrong draft per draft call, cycled: all right (3 covers k <= 3), partial
  // acceptance at every depth, and none accepted.
  const std::vector<int32_t> pattern = {3, 1, 0, 2, 3, 3, 1, 2, 0};
  int64_t partial_total = 0, accepted_total = 0;
  for (const Case& c : cases) {
    RequestSpec s;
    s.prompt_ids.resize(c.prompt_len);
    for (auto& t : s.prompt_ids) t = 2 + static_cast<int32_t>(rng() % 4000);
    s.max_tokens = c.max_tokens;
    s.sampling.temperature = 0.0f;  // greedy
    s.ignore_eos = true;
    const std::vector<int32_t> want = greedy(s.prompt_ids, c.max_tokens);
    std::vector<int32_t> oracle = s.prompt_ids;
    oracle.insert(oracle.end(), want.begin(), want.end());
    for (int32_t k = 1; k <= 3; ++k) {
      auto runner = std::make_shared<ForcedDraftRunner>(open_model(checkpoint_->dir()), oracle, pattern);
      EngineOptions o;
      o.speculation = true;
      o.draft_tokens = k;
      auto engine = make_engine(runner, o);
      const auto out = run_all(*engine, {s});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].tokens, want) << "prompt " << c.prompt_len << " k " << k;
      const EngineMetrics m = engine->metrics();
      EXPECT_EQ(m.draft_tokens_total, runner->drafted()) << "k " << k;
      EXPECT_EQ(m.accepted_draft_tokens_total, runner->expected_accepted()) << "k " << k;
      EXPECT_GT(m.accepted_draft_tokens_total, 0);
      // Accepted drafts save steps: fewer forward steps than generated tokens.
      EXPECT_LT(m.steps_total, m.generated_tokens_total) << "k " << k;
      std::printf("prompt %d k %d: %lld drafted, %lld accepted, %lld steps for %lld tokens\n", c.prompt_len, k,
                  static_cast<long long>(m.draft_tokens_total), static_cast<long long>(m.accepted_draft_tokens_total),
                  static_cast<long long>(m.steps_total), static_cast<long long>(m.generated_tokens_total));
      partial_total += runner->partial();
      accepted_total += m.accepted_draft_tokens_total;
    }
  }
  EXPECT_GT(partial_total, 0) << "partial acceptance (rollback of the rest) must have been exercised";
  EXPECT_GT(accepted_total, 40);
}

}  // namespace
}  // namespace dsinfer::engine::testing
