#include <gtest/gtest.h>

#include <thread>

#include "kvstore/swa_pool.h"
#include "kvstore_test_util.h"

namespace dsinfer::kvstore {
namespace {

using testing::FakeClock;

struct Snap {
  int64_t position;
};

std::shared_ptr<const Snap> snap(int64_t p) { return std::make_shared<const Snap>(Snap{p}); }

SwaPoolOptions options(FakeClock& clock, int64_t cap = 1000) {
  SwaPoolOptions o;
  o.clock = clock.clock();
  o.capacity_bytes = cap;
  return o;  // TTL: the default 180 s
}

TEST(KvSwaPool, DefaultTtlIs180Seconds) { EXPECT_EQ(SwaPoolOptions{}.ttl_ns, 180 * kNsPerSecond); }

TEST(KvSwaPool, EntriesExpireAfterTheTtlSinceTheirLastUse) {
  FakeClock clock;
  SwaPool<Snap> pool(options(clock));
  ASSERT_TRUE(pool.put(1, snap(128), 100));
  ASSERT_TRUE(pool.put(2, snap(256), 100));
  clock.advance(100 * kNsPerSecond);
  ASSERT_NE(pool.get(1), nullptr);  // used at 100 s: lives until 280 s
  clock.advance(81 * kNsPerSecond);  // 181 s
  EXPECT_EQ(pool.get(2), nullptr);
  auto one = pool.get(1);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->position, 128);
  clock.advance(181 * kNsPerSecond);
  EXPECT_EQ(pool.expire(), 1);
  EXPECT_EQ(pool.size(), 0);
  EXPECT_EQ(pool.bytes(), 0);
  EXPECT_EQ(pool.stats().expiries.load(), 2);
  EXPECT_EQ(pool.stats().hits.load(), 2);
  EXPECT_EQ(pool.stats().misses.load(), 1);
  EXPECT_EQ(pool.stats().entries.load(), 0);
}

TEST(KvSwaPool, ByteCapEvictsLeastRecentlyUsed) {
  FakeClock clock;
  SwaPool<Snap> pool(options(clock, 300));
  pool.put(1, snap(1), 100);
  pool.put(2, snap(2), 100);
  pool.put(3, snap(3), 100);
  ASSERT_NE(pool.get(1), nullptr);  // 2 is now the least recently used
  pool.put(4, snap(4), 150);        // needs 150: evicts 2, then 3
  EXPECT_EQ(pool.get(2), nullptr);
  EXPECT_EQ(pool.get(3), nullptr);
  EXPECT_NE(pool.get(1), nullptr);
  EXPECT_NE(pool.get(4), nullptr);
  EXPECT_EQ(pool.bytes(), 250);
  EXPECT_EQ(pool.stats().evictions.load(), 2);
  EXPECT_EQ(pool.stats().bytes.load(), 250);
  EXPECT_FALSE(pool.put(5, snap(5), 301)) << "larger than the whole pool";
  EXPECT_EQ(pool.size(), 2);
}

TEST(KvSwaPool, ReplacingAKeyKeepsTheBytesRight) {
  FakeClock clock;
  SwaPool<Snap> pool(options(clock));
  pool.put(7, snap(1), 100);
  pool.put(7, snap(2), 40);
  EXPECT_EQ(pool.size(), 1);
  EXPECT_EQ(pool.bytes(), 40);
  EXPECT_EQ(pool.get(7)->position, 2);
}

TEST(KvSwaPool, ExpiredEntriesMakeRoomBeforeLiveOnesAreEvicted) {
  FakeClock clock;
  SwaPool<Snap> pool(options(clock, 200));
  pool.put(1, snap(1), 100);
  clock.advance(100 * kNsPerSecond);
  pool.put(2, snap(2), 100);
  clock.advance(100 * kNsPerSecond);  // 1 expired, 2 live
  pool.put(3, snap(3), 100);
  EXPECT_EQ(pool.stats().expiries.load(), 1);
  EXPECT_EQ(pool.stats().evictions.load(), 0);
  EXPECT_NE(pool.get(2), nullptr);
}

TEST(KvSwaPool, ManyThreadsKeepTheAccountsConsistent) {
  FakeClock clock;
  SwaPool<Snap> pool(options(clock, 5000));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const uint64_t key = static_cast<uint64_t>((i * 7 + t) % 97);
        if (i % 3 == 0) pool.put(key, snap(i), 10 + key);
        else pool.get(key);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool.bytes(), 5000);
  int64_t bytes = 0;
  for (uint64_t key = 0; key < 97; ++key) bytes += pool.get(key) ? static_cast<int64_t>(10 + key) : 0;
  EXPECT_EQ(bytes, pool.bytes());
}

}  // namespace
}  // namespace dsinfer::kvstore
