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

TEST(PrefillBalancer, PullTakesAtMostMaxJobs) {
  PrefillBalancer b;
  for (uint64_t i = 1; i <= 4; ++i) b.enqueue(job(i, 100, static_cast<int64_t>(i)));
  EXPECT_EQ(ids(b.pull(1000, 1000, 5, 2)), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ids(b.pull(1000, 1000, 5, 0)), (std::vector<uint64_t>{}));
  EXPECT_EQ(ids(b.pull(1000, 1000, 5)), (std::vector<uint64_t>{3, 4}));
}

// Two routers over one prefill worker (max_running 8, quota 16K tokens per router). Router A has 2
// prefills of 3000 tokens on it; the heartbeat, taken when A had 1 of them (3000 tokens), reports
// running 4 + waiting 1 requests and 12000 prompt tokens: router B's share is 4 requests and 9000
// tokens. A may send 8 - 2 - 4 = 2 more requests and 16384 - 6000 - 9000 = 1384 more tokens.
TEST(PrefillRoom, CountsTheOtherRoutersShareOfTheHeartbeat) {
  PrefillWorkerLoad w;
  w.max_running = 8;
  w.heartbeat_requests = 4 + 1;
  w.heartbeat_tokens = 12000;
  w.own_requests_at_heartbeat = 1;
  w.own_tokens_at_heartbeat = 3000;
  w.own_requests = 2;
  w.own_tokens = 6000;
  PrefillRoom r = prefill_room(w, 16384, 256);
  EXPECT_EQ(r.requests, 2);
  EXPECT_EQ(r.tokens, 1384);
  EXPECT_TRUE(r.any());
  // Router B, which had the other 4 requests (9000 tokens) when the heartbeat came, sees A's share:
  // 1 request and 3000 tokens, plus its own.
  PrefillWorkerLoad b = w;
  b.own_requests_at_heartbeat = b.own_requests = 4;
  b.own_tokens_at_heartbeat = b.own_tokens = 9000;
  r = prefill_room(b, 16384, 256);
  EXPECT_EQ(r.requests, 8 - 4 - 1);
  EXPECT_EQ(r.tokens, 16384 - 9000 - 3000);
  // The waiting request alone fills the last slot: nothing more for anyone.
  w.heartbeat_requests = 7 + 1;
  w.own_requests_at_heartbeat = w.own_requests = 0;
  w.own_tokens_at_heartbeat = w.own_tokens = 0;
  r = prefill_room(w, 16384, 256);
  EXPECT_EQ(r.requests, 0);
  EXPECT_FALSE(r.any());
}

TEST(PrefillRoom, AStaleHeartbeatDoesNotCountThisRoutersCallsTwice) {
  PrefillWorkerLoad w;
  w.max_running = 4;
  // At the heartbeat this router had 3 requests (9000 tokens) there and nobody else; 2 of them have been
  // answered since: 1 request, 3000 tokens are its own now, and the others' share is still 0.
  w.heartbeat_requests = 3;
  w.heartbeat_tokens = 9000;
  w.own_requests_at_heartbeat = 3;
  w.own_tokens_at_heartbeat = 9000;
  w.own_requests = 1;
  w.own_tokens = 3000;
  PrefillRoom r = prefill_room(w, 16384, 256);
  EXPECT_EQ(r.requests, 3);
  EXPECT_EQ(r.tokens, 13384);
  // A worker without capacity in its heartbeat: the default; one with more load than the quota: none.
  w.max_running = 0;
  EXPECT_EQ(prefill_room(w, 16384, 256).requests, 255);
  w.heartbeat_tokens = 40000;
  EXPECT_EQ(prefill_room(w, 16384, 256).tokens, 0);
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
