#include "router/prefill_balancer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsinfer::router {
namespace {

constexpr int64_t kK = 1024;
constexpr int64_t kSec = 1'000'000'000;

PrefillJob job(uint64_t id, int64_t prompt, int64_t arrival_ns, int64_t compute = -1) {
  return {id, prompt, compute < 0 ? prompt : compute, arrival_ns};
}

std::vector<uint64_t> ids(const std::vector<PrefillJob>& jobs) {
  std::vector<uint64_t> out;
  for (const auto& j : jobs) out.push_back(j.id);
  return out;
}

TEST(PrefillBalancer, BucketsByPromptLengthAtTheSpecBounds) {
  PrefillBalancer b;
  ASSERT_EQ(b.bucket_count(), 4u);
  EXPECT_EQ(b.bucket_of(1), 0u);
  EXPECT_EQ(b.bucket_of(16 * kK - 1), 0u);
  EXPECT_EQ(b.bucket_of(16 * kK), 1u);
  EXPECT_EQ(b.bucket_of(64 * kK - 1), 1u);
  EXPECT_EQ(b.bucket_of(64 * kK), 2u);
  EXPECT_EQ(b.bucket_of(256 * kK - 1), 2u);
  EXPECT_EQ(b.bucket_of(256 * kK), 3u);
  EXPECT_EQ(b.bucket_of(1024 * kK), 3u);
}

TEST(PrefillBalancer, ParsesConfigurableBounds) {
  EXPECT_EQ(parse_bucket_bounds("16K,64K,256K"), (std::vector<int64_t>{16384, 65536, 262144}));
  EXPECT_EQ(parse_bucket_bounds("100,2M"), (std::vector<int64_t>{100, 2097152}));
  EXPECT_THROW(parse_bucket_bounds("64K,16K"), core::Error);
  EXPECT_THROW(parse_bucket_bounds("16Q"), core::Error);
  EXPECT_THROW(parse_bucket_bounds(""), core::Error);
  PrefillBalancer b({{100, 200}, kSec});
  EXPECT_EQ(b.bucket_count(), 3u);
  EXPECT_EQ(b.bucket_of(150), 1u);
}

TEST(PrefillBalancer, OldestFirstWhenItFits) {
  PrefillBalancer b;
  b.enqueue(job(1, 1000, 20));
  b.enqueue(job(2, 20 * kK, 10));  // the router enqueued it late; its arrival still counts
  b.enqueue(job(3, 500, 30));
  // Quota 30K fits all three; oldest arrival first across buckets: 2 (t=10), 1 (t=20), 3 (t=30).
  EXPECT_EQ(ids(b.pull(30 * kK, 30 * kK, 100)), (std::vector<uint64_t>{2, 1, 3}));
  EXPECT_EQ(b.queued(), 0u);
}

TEST(PrefillBalancer, QuotaLimitsWhatAWorkerTakes) {
  PrefillBalancer b;
  b.enqueue(job(1, 4000, 1));
  b.enqueue(job(2, 4000, 2));
  b.enqueue(job(3, 4000, 3));
  // Remaining 9000 of 16000: 1 (4000, left 5000), 2 (4000, left 1000); 3 does not fit and the worker is busy.
  EXPECT_EQ(ids(b.pull(9000, 16000, 10)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b.queued(0), 1u);
  EXPECT_EQ(b.queued_compute_tokens(0), 4000);
  EXPECT_TRUE(b.pull(0, 16000, 10).empty());
}

TEST(PrefillBalancer, ComputeTokensNotPromptDecideTheFit) {
  PrefillBalancer b;
  // A 100K prompt with 98K found in the KV store computes 2K tokens: it sits in bucket 2 but fits a 3K quota.
  b.enqueue(job(1, 100 * kK, 1, 2 * kK));
  EXPECT_EQ(b.bucket_of(100 * kK), 2u);
  EXPECT_EQ(ids(b.pull(3 * kK, 16 * kK, 5)), (std::vector<uint64_t>{1}));
}

TEST(PrefillBalancer, ShortPromptsFillQuotaALongOneCannotUse) {
  PrefillBalancer b;
  b.enqueue(job(1, 40 * kK, 1));  // bucket 1, oldest
  b.enqueue(job(2, 3 * kK, 2));   // bucket 0
  b.enqueue(job(3, 3 * kK, 3));   // bucket 0
  // Busy worker with 7K left: the oldest (40K) does not fit, so the bucket-0 heads go: 2 (left 4K), 3 (left 1K).
  EXPECT_EQ(ids(b.pull(7 * kK, 16 * kK, 10)), (std::vector<uint64_t>{2, 3}));
  // An idle worker takes the long one even though it exceeds one quota (it chunks it).
  EXPECT_EQ(ids(b.pull(16 * kK, 16 * kK, 11)), (std::vector<uint64_t>{1}));
}

TEST(PrefillBalancer, AStarvingHeadIsNotBypassed) {
  PrefillBalancer b({{16 * kK, 64 * kK, 256 * kK}, 2 * kSec});
  b.enqueue(job(1, 40 * kK, 0));
  b.enqueue(job(2, 3 * kK, 1));
  // At t = 2 s job 1 has waited the starvation limit: a busy worker takes nothing rather than bypass it.
  EXPECT_TRUE(b.pull(7 * kK, 16 * kK, 2 * kSec).empty());
  // Just before the limit, bypassing was still allowed (checked on a copy of the same queue).
  PrefillBalancer c({{16 * kK, 64 * kK, 256 * kK}, 2 * kSec});
  c.enqueue(job(1, 40 * kK, 0));
  c.enqueue(job(2, 3 * kK, 1));
  EXPECT_EQ(ids(c.pull(7 * kK, 16 * kK, 2 * kSec - 1)), (std::vector<uint64_t>{2}));
  // The next idle worker takes the starving job first, then fills nothing more (its quota is spent).
  EXPECT_EQ(ids(b.pull(16 * kK, 16 * kK, 2 * kSec)), (std::vector<uint64_t>{1}));
  EXPECT_EQ(b.queued(), 1u);
}

TEST(PrefillBalancer, EqualArrivalsKeepEnqueueOrder) {
  PrefillBalancer b;
  b.enqueue(job(7, 20 * kK, 5));
  b.enqueue(job(8, 100, 5));
  b.enqueue(job(9, 70 * kK, 5));
  EXPECT_EQ(ids(b.pull(200 * kK, 200 * kK, 5)), (std::vector<uint64_t>{7, 8, 9}));
}

TEST(PrefillBalancer, CancelRemovesAQueuedJob) {
  PrefillBalancer b;
  b.enqueue(job(1, 100, 1));
  b.enqueue(job(2, 100, 2));
  EXPECT_TRUE(b.cancel(1));
  EXPECT_FALSE(b.cancel(1));
  EXPECT_EQ(ids(b.pull(1000, 1000, 3)), (std::vector<uint64_t>{2}));
}

TEST(PrefillBalancer, RejectsBadJobsAndQuotas) {
  PrefillBalancer b;
  EXPECT_THROW(b.enqueue(job(1, 100, 0, 0)), core::Error);    // nothing to compute: the last token always is
  EXPECT_THROW(b.enqueue(job(1, 100, 0, 101)), core::Error);  // more than the prompt
  EXPECT_THROW(b.pull(5, 4, 0), core::Error);
  EXPECT_THROW(b.pull(-1, 4, 0), core::Error);
}

}  // namespace
}  // namespace dsinfer::router
