// The forward pass with many more threads than cores (a pool sized for a 64+ core server): every
// product, attention and MoE region splits into more tasks than the machine runs at once, and the
// logits must still be bitwise those of one thread, for a batch of sequences at different positions,
// in the exact numerics and in the fast ones (int8 expert products, the default of the serving commands).
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "test_models.h"

namespace dsinfer::model::deepseek_v4 {
namespace {

using testing::first_difference;
using testing::random_tokens;

void expect_many_threads_give_the_logits_of_one(NumericsMode mode) {
  const std::string dir = testing::make_test_model("tiny512", testing::tiny_config());
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t T = 48;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(random_tokens(T, 512, 40 + i));

  ModelOptions one;
  one.threads = 1;
  one.numerics.mode = mode;
  auto m1 = Model::load(dir, one);
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) {
    auto st = m1->new_sequence();
    alone.push_back(testing::run_chunks(*m1, *st, p, 0, T, {T}));
  }

  ModelOptions many;
  many.threads = std::clamp(4 * cores, 64, 256);
  many.numerics.mode = mode;
  auto mm = Model::load(dir, many);
  ASSERT_GT(mm->pool().size(), cores);
  // A prefill chunk of each, then the rest a few tokens at a time, all three sequences in every step.
  std::vector<std::unique_ptr<SequenceState>> states;
  for (int i = 0; i < 3; ++i) states.push_back(mm->new_sequence());
  std::vector<std::vector<float>> got(3);
  for (int64_t pos = 0, step = 0; pos < T; ++step) {
    const int64_t n = std::min<int64_t>(step == 0 ? 37 : 1 + step % 3, T - pos);
    std::vector<SequenceInput> batch(3);
    for (int i = 0; i < 3; ++i) {
      batch[i].state = states[i].get();
      batch[i].tokens = std::span<const int32_t>(prompts[i].data() + pos, n);
      batch[i].logits = LogitRows::kAll;
    }
    std::vector<SequenceOutput> out(3);
    mm->forward(batch, out);
    for (int i = 0; i < 3; ++i) got[i].insert(got[i].end(), out[i].logits.begin(), out[i].logits.end());
    pos += n;
  }
  for (int i = 0; i < 3; ++i) {
    const int64_t diff = first_difference(alone[i], got[i]);
    EXPECT_EQ(diff, -1) << "sequence " << i << " differs first at position " << diff / 512 << " with "
                        << mm->pool().size() << " threads";
  }
}

TEST(V4Threads, MoreThreadsThanCoresGiveBitwiseTheLogitsOfOne) {
  expect_many_threads_give_the_logits_of_one(NumericsMode::kExact);
}

TEST(V4Threads, MoreThreadsThanCoresGiveBitwiseTheLogitsOfOneInFastNumerics) {
  expect_many_threads_give_the_logits_of_one(NumericsMode::kFast);
}

}  // namespace
}  // namespace dsinfer::model::deepseek_v4
