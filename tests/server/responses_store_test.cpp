// The Responses store's lifetime rules with an injected clock: the TTL from creation, the byte cap with
// the least recently used dropped first, replacement and removal.
#include "server/responses_store.h"

#include <gtest/gtest.h>

namespace dsinfer::server {
namespace {

using namespace std::chrono_literals;

struct FakeClock {
  ResponsesStore::Clock::time_point t{};
  ResponsesStore::Now now() {
    return [this] { return t; };
  }
};

ResponsesStore::Stored entry(size_t conversation_bytes, const std::string& response = "{}") {
  return {std::string(conversation_bytes, 'c'), response};
}

TEST(ResponsesStoreTest, KeepsAResponseUntilItsTtlEnds) {
  FakeClock clock;
  ResponsesStore store(60s, 1 << 20, clock.now());
  ASSERT_TRUE(store.put("resp_a", {"[1]", "{\"id\":\"resp_a\"}"}));
  clock.t += 59s;
  auto got = store.get("resp_a");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->conversation, "[1]");
  EXPECT_EQ(got->response, "{\"id\":\"resp_a\"}");
  clock.t += 1s;  // exactly the TTL: gone, and a read does not extend it
  EXPECT_FALSE(store.get("resp_a").has_value());
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0);
}

TEST(ResponsesStoreTest, ExpiredEntriesFreeTheirBytesOnTheNextPut) {
  FakeClock clock;
  ResponsesStore store(10s, 1 << 20, clock.now());
  ASSERT_TRUE(store.put("a", entry(100)));
  clock.t += 5s;
  ASSERT_TRUE(store.put("b", entry(100)));
  clock.t += 5s;  // a expires, b has 5 s left
  ASSERT_TRUE(store.put("c", entry(100)));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(store.bytes(), 2 * (1 + 100 + 2));
  EXPECT_FALSE(store.get("a").has_value());
  EXPECT_TRUE(store.get("b").has_value());
}

TEST(ResponsesStoreTest, TheByteCapDropsTheLeastRecentlyUsed) {
  FakeClock clock;
  const int64_t each = 1 + 100 + 2;  // id + conversation + "{}"
  ResponsesStore store(1h, 3 * each, clock.now());
  ASSERT_TRUE(store.put("a", entry(100)));
  ASSERT_TRUE(store.put("b", entry(100)));
  ASSERT_TRUE(store.put("c", entry(100)));
  EXPECT_EQ(store.bytes(), 3 * each);
  ASSERT_TRUE(store.get("a").has_value());  // a is now the most recently used; b the least
  ASSERT_TRUE(store.put("d", entry(100)));
  EXPECT_FALSE(store.get("b").has_value());
  EXPECT_TRUE(store.get("a").has_value());
  EXPECT_TRUE(store.get("c").has_value());
  EXPECT_TRUE(store.get("d").has_value());
  EXPECT_EQ(store.bytes(), 3 * each);
  // One twice the size makes room by dropping the two least recently used (a, then c).
  ASSERT_TRUE(store.put("e", entry(100 + each)));
  EXPECT_FALSE(store.get("a").has_value());
  EXPECT_FALSE(store.get("c").has_value());
  EXPECT_TRUE(store.get("d").has_value());
  EXPECT_TRUE(store.get("e").has_value());
  EXPECT_EQ(store.bytes(), 3 * each);
}

TEST(ResponsesStoreTest, AnEntryLargerThanTheCapIsNotStoredAndEvictsNothing) {
  FakeClock clock;
  ResponsesStore store(1h, 200, clock.now());
  ASSERT_TRUE(store.put("a", entry(100)));
  EXPECT_FALSE(store.put("b", entry(300)));
  EXPECT_FALSE(store.get("b").has_value());
  EXPECT_TRUE(store.get("a").has_value());
}

TEST(ResponsesStoreTest, ACapOfZeroStoresNothing) {
  FakeClock clock;
  ResponsesStore store(1h, 0, clock.now());
  EXPECT_FALSE(store.put("a", entry(0)));
  EXPECT_FALSE(store.get("a").has_value());
  EXPECT_EQ(store.size(), 0u);
}

TEST(ResponsesStoreTest, PutReplacesAndEraseRemoves) {
  FakeClock clock;
  ResponsesStore store(10s, 1 << 20, clock.now());
  ASSERT_TRUE(store.put("a", {"[1]", "{}"}));
  clock.t += 8s;
  ASSERT_TRUE(store.put("a", {"[1,2]", "{}"}));  // a new TTL and size
  EXPECT_EQ(store.size(), 1u);
  EXPECT_EQ(store.bytes(), 1 + 5 + 2);
  clock.t += 8s;
  auto got = store.get("a");
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->conversation, "[1,2]");
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_FALSE(store.get("a").has_value());
  EXPECT_EQ(store.bytes(), 0);
}

}  // namespace
}  // namespace dsinfer::server
