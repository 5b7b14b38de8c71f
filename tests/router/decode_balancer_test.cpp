#include "router/decode_balancer.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsinfer::router {
namespace {

TEST(DecodeBalancer, PicksTheLowestCombinedShare) {
  DecodeBalancer b(0.5);
  const size_t a = b.add_instance("a", 10, 1000);
  const size_t c = b.add_instance("c", 10, 1000);
  b.place(a, 100, 100);  // a: 1 request, 100 tokens
  b.place(c, 500, 500);  // c: 1 request, 500 tokens
  b.place(c, 100, 100);  // c: 2 requests, 600 tokens
  // A 200-token sequence: a -> 0.5*2/10 + 0.5*300/1000 = 0.25; c -> 0.5*3/10 + 0.5*800/1000 = 0.55.
  EXPECT_EQ(b.choose(200, 200), a);
}

TEST(DecodeBalancer, CountWeightTradesRequestsAgainstKv) {
  // a: 1 request of 900 tokens; c: 4 requests of 100 tokens (400). Limits 10 requests, 2000 tokens.
  auto make = [](double w) {
    DecodeBalancer b(w);
    b.add_instance("a", 10, 2000);
    b.add_instance("c", 10, 2000);
    b.place(0, 900, 900);
    for (int i = 0; i < 4; ++i) b.place(1, 100, 100);
    return b;
  };
  // w = 1 (count only): a 2/10 < c 5/10 -> a.  w = 0 (KV only): a 1000/2000 > c 500/2000 -> c.
  EXPECT_EQ(make(1.0).choose(100, 100), 0u);
  EXPECT_EQ(make(0.0).choose(100, 100), 1u);
  // w = 0.5: a 0.5*0.2 + 0.5*0.5 = 0.35; c 0.5*0.5 + 0.5*0.25 = 0.375 -> a.
  EXPECT_EQ(make(0.5).choose(100, 100), 0u);
  // w = 0.3: a 0.06 + 0.35 = 0.41; c 0.15 + 0.175 = 0.325 -> c.
  EXPECT_EQ(make(0.3).choose(100, 100), 1u);
}

TEST(DecodeBalancer, TiesGoToTheLowestIndex) {
  DecodeBalancer b;
  b.add_instance("x", 4, 100);
  b.add_instance("y", 4, 100);
  EXPECT_EQ(b.choose(10, 10), 0u);
}

TEST(DecodeBalancer, SharesOfOwnLimitsBalanceUnequalInstances) {
  DecodeBalancer b(0.5);
  b.add_instance("small", 4, 1000);
  b.add_instance("big", 16, 4000);
  b.place(1, 1000, 1000);
  b.place(1, 1000, 1000);
  // small: 0.5*1/4 + 0.5*500/1000 = 0.375; big: 0.5*3/16 + 0.5*2500/4000 = 0.40625 -> small.
  EXPECT_EQ(b.choose(500, 500), 0u);
}

TEST(DecodeBalancer, NeverOverCapacityAndFullClusterIsReported) {
  DecodeBalancer b;
  b.add_instance("a", 2, 1000);
  b.add_instance("c", 2, 1000);
  b.place(0, 900, 900);
  // 200 tokens do not fit a (1100 > 1000): c even though its score would not matter.
  EXPECT_EQ(b.choose(200, 200), 1u);
  b.place(1, 200, 200);
  b.place(1, 700, 700);  // c: 2 requests (its limit), 900 tokens
  EXPECT_EQ(b.choose(100, 100), 0u);  // a has 1 request and 100 tokens of room
  EXPECT_EQ(b.choose(101, 101), std::nullopt);  // a has no room for 101, c no request slot
  b.place(0, 100, 100);
  EXPECT_EQ(b.choose(1, 1), std::nullopt);  // full
  b.release(1, 700, 700);
  EXPECT_EQ(b.choose(1, 1), 1u);
  EXPECT_THROW(b.place(0, 1, 1), core::Error);  // placing over the limits is a bug, not a choice
}

TEST(DecodeBalancer, ScoreByHeldKvAdmitByReservation) {
  DecodeBalancer b(0.0);  // KV share only
  b.add_instance("a", 10, 1000);
  b.add_instance("c", 10, 1000);
  b.place(0, 100, 900);  // a holds 100 now, may grow to 900
  b.place(1, 500, 500);
  // 100 held, 100 reserved: a is eligible (900 + 100 <= 1000) and scores (100 + 100)/1000 = 0.2 against
  // c's (500 + 100)/1000 = 0.6.
  EXPECT_EQ(b.choose(100, 100), 0u);
  // 100 held, 200 reserved: a's reservations would reach 1100: only c.
  EXPECT_EQ(b.choose(100, 200), 1u);
  b.grow(0, 800);  // a's sequence grew to its reservation
  EXPECT_THROW(b.grow(0, 1), core::Error);  // beyond it is a bug
  EXPECT_THROW(b.choose(10, 5), core::Error);  // a reservation below what is held
  b.release(0, 900, 900);
  EXPECT_EQ(b.instances()[0].kv_tokens, 0);
  EXPECT_EQ(b.instances()[0].reserved_tokens, 0);
}

TEST(DecodeBalancer, InstancesNotAcceptingAreSkipped) {
  DecodeBalancer b;
  b.add_instance("a", 4, 100);
  b.add_instance("c", 4, 100);
  b.set_accepting(0, false);
  EXPECT_EQ(b.choose(10, 10), 1u);
  b.set_accepting(1, false);
  EXPECT_EQ(b.choose(10, 10), std::nullopt);
}

TEST(DecodeBalancer, GrowAndImbalance) {
  DecodeBalancer b;
  b.add_instance("a", 8, 1000);
  b.add_instance("c", 8, 1000);
  EXPECT_DOUBLE_EQ(b.kv_imbalance(), 1.0);  // empty: nothing to balance
  b.place(0, 300, 300);
  b.place(1, 100, 200);
  b.grow(1, 100);
  // KV 300 and 200: max/mean = 300/250. Requests 1 and 1: 1.
  EXPECT_DOUBLE_EQ(b.kv_imbalance(), 1.2);
  EXPECT_DOUBLE_EQ(b.request_imbalance(), 1.0);
  EXPECT_DOUBLE_EQ(imbalance({4, 0, 0, 0}), 4.0);
}

}  // namespace
}  // namespace dsinfer::router
