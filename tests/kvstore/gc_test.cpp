#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "kvstore/block_store.h"
#include "kvstore/gc.h"
#include "kvstore/inspect.h"
#include "kvstore_test_util.h"

namespace dsinfer::kvstore {
namespace {

using testing::block_payload;
using testing::block_tokens;
using testing::FakeClock;
using testing::kDay;
using testing::kHour;
using testing::TempDir;
using testing::test_key;

class KvGc : public ::testing::Test {
 protected:
  StoreOptions options() {
    StoreOptions o;
    o.dir = dir_.path();
    o.clock = clock_.clock();
    o.read_backend = ReadBackend::kPread;
    return o;
  }
  void put(BlockStore& store, uint64_t i, TrafficClass c, size_t bytes = 1000) {
    ASSERT_TRUE(store.put(test_key(i), block_tokens(test_key(i)), block_payload(i, bytes), c));
    store.flush();
  }
  bool stored(uint64_t i) { return std::filesystem::exists(record_path(dir_.path(), test_key(i))); }
  bool hit(BlockStore& store, uint64_t i) {
    return store.load(LoadRequest{test_key(i), block_tokens(test_key(i))}).get().hit();
  }
  TempDir dir_;
  FakeClock clock_;
};

TEST_F(KvGc, RecordsExpirePerTrafficClassFromTheirLastUse) {
  BlockStore store(options());  // agent 3 days, chat 7 days
  put(store, 0, TrafficClass::kAgent);
  put(store, 1, TrafficClass::kAgent);
  put(store, 2, TrafficClass::kChat);
  put(store, 3, TrafficClass::kChat);
  clock_.advance(2 * kDay);
  ASSERT_TRUE(hit(store, 1));  // agent record used on day 2: lives until day 5
  ASSERT_TRUE(hit(store, 3));  // chat record used on day 2: lives until day 9

  clock_.advance(kDay + kHour);  // day 3 + 1 h
  auto r = store.collect_garbage();
  EXPECT_EQ(r.expired, 1);
  EXPECT_FALSE(stored(0));
  EXPECT_TRUE(stored(1) && stored(2) && stored(3));

  clock_.advance(2 * kDay);  // day 5 + 1 h
  r = store.collect_garbage();
  EXPECT_EQ(r.expired, 1);
  EXPECT_FALSE(stored(1));
  EXPECT_TRUE(stored(2) && stored(3));

  clock_.advance(2 * kDay);  // day 7 + 1 h
  EXPECT_EQ(store.collect_garbage().expired, 1);
  EXPECT_FALSE(stored(2));
  EXPECT_TRUE(stored(3));
  clock_.advance(2 * kDay);  // day 9 + 1 h
  EXPECT_EQ(store.collect_garbage().expired, 1);
  EXPECT_FALSE(stored(3));
  EXPECT_EQ(store.stats().gc_expired.load(), 4);
}

TEST_F(KvGc, ConfiguredTtlsApply) {
  auto o = options();
  o.ttl = parse_ttl_policy("agent=1h,chat=2h");
  BlockStore store(o);
  put(store, 0, TrafficClass::kAgent);
  put(store, 1, TrafficClass::kChat);
  clock_.advance(kHour + 1);
  EXPECT_EQ(store.collect_garbage().expired, 1);
  EXPECT_FALSE(stored(0));
  EXPECT_TRUE(stored(1));
}

// Ten records used at times 0..9 (record 0 used again last); the cap is hit: the least recently used go
// first, down to the low watermark.
TEST_F(KvGc, WatermarksEvictLeastRecentlyUsedFirst) {
  BlockStore store(options());
  for (uint64_t i = 0; i < 10; ++i) {
    put(store, i, TrafficClass::kChat);
    clock_.advance(kNsPerSecond);
  }
  ASSERT_TRUE(hit(store, 0));
  const int64_t record_bytes = std::filesystem::file_size(record_path(dir_.path(), test_key(0)));
  // 10 records = 100% of the cap > 95%: evict down to 85%, i.e. to 8 records.
  GcOptions gc;
  gc.capacity_bytes = 10 * record_bytes;
  auto r = collect_garbage(dir_.path(), gc, clock_.clock());
  EXPECT_EQ(r.evicted, 2);
  EXPECT_EQ(r.records_left, 8);
  EXPECT_EQ(r.bytes_left, 8 * record_bytes);
  EXPECT_TRUE(stored(0));
  EXPECT_FALSE(stored(1));
  EXPECT_FALSE(stored(2));
  for (uint64_t i = 3; i < 10; ++i) EXPECT_TRUE(stored(i)) << i;
  // Below the high watermark (8 of 10 = 80%): nothing more goes.
  EXPECT_EQ(collect_garbage(dir_.path(), gc, clock_.clock()).evicted, 0);
  // A smaller cap: 8 records in a cap of 7 -> down to 85% of 7 = 5.95 records, i.e. 5 left; the oldest
  // uses go (3, 4, 5), record 0 (used last) stays.
  gc.capacity_bytes = 7 * record_bytes;
  r = collect_garbage(dir_.path(), gc, clock_.clock());
  EXPECT_EQ(r.evicted, 3);
  EXPECT_TRUE(stored(0));
  for (uint64_t i = 3; i < 6; ++i) EXPECT_FALSE(stored(i)) << i;
  for (uint64_t i = 6; i < 10; ++i) EXPECT_TRUE(stored(i)) << i;
}

TEST_F(KvGc, RemoveIfStillPutsBackARefreshedRecord) {
  BlockStore store(options());
  put(store, 0, TrafficClass::kChat);
  const std::string path = record_path(dir_.path(), test_key(0));
  // The predicate sees the mtime after the file was taken aside: "no longer wanted" puts it back.
  EXPECT_FALSE(remove_if_still(path, [](int64_t) { return false; }));
  EXPECT_TRUE(hit(store, 0));
  EXPECT_TRUE(remove_if_still(path, [](int64_t) { return true; }));
  EXPECT_FALSE(stored(0));
  EXPECT_FALSE(remove_if_still(path, [](int64_t) { return true; })) << "already gone: ENOENT is fine";
  for (const auto& f : scan_store(dir_.path())) EXPECT_FALSE(f.scratch) << f.path;
}

// Scratch files are judged by their last change (ctime, which the kernel sets and nobody can fake), so
// this test runs on the real clock, plus two hours for the second pass.
TEST_F(KvGc, StaleScratchFilesAreRemovedFreshOnesKept) {
  auto o = options();
  o.clock = system_clock();
  BlockStore store(o);
  put(store, 0, TrafficClass::kChat);
  const std::string leaf = record_dir(dir_.path(), test_key(0));
  const std::string temp = leaf + "/.tmp.host.1.2.3", gc_left = leaf + "/.gc.host.7.8.9";
  for (const auto& p : {temp, gc_left}) std::ofstream(p) << "partial";
  // A .gc file is a renamed record: its mtime is old, yet it was just taken aside.
  ASSERT_EQ(set_mtime(gc_left, system_clock()() - 30 * kDay), 0);
  GcOptions gc;  // scratch files older than 1 h go
  auto r = collect_garbage(dir_.path(), gc, system_clock());
  EXPECT_EQ(r.scratch_removed, 0);
  EXPECT_TRUE(std::filesystem::exists(temp));
  EXPECT_TRUE(std::filesystem::exists(gc_left));
  const int64_t later = system_clock()() + 2 * kHour;
  r = collect_garbage(dir_.path(), gc, [later] { return later; });
  EXPECT_EQ(r.scratch_removed, 2);
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_FALSE(std::filesystem::exists(gc_left));
  EXPECT_TRUE(stored(0));
  EXPECT_EQ(r.expired, 0);
}

TEST_F(KvGc, UnreadableHeadersAreCollectedAndStatCounts) {
  BlockStore store(options());
  put(store, 0, TrafficClass::kAgent);
  put(store, 1, TrafficClass::kChat);
  put(store, 2, TrafficClass::kChat);
  const auto s = summarize_store(dir_.path());
  EXPECT_EQ(s.records, 3);
  EXPECT_EQ(s.per_class[0].records, 1);
  EXPECT_EQ(s.per_class[1].records, 2);
  EXPECT_EQ(s.bytes, s.per_class[0].bytes + s.per_class[1].bytes);
  EXPECT_EQ(s.oldest_mtime_ns, clock_.now());
  // A record whose header is garbage, 4 days unused: past the shortest TTL, so the collector opens it.
  const std::string bad = record_path(dir_.path(), test_key(1));
  std::ofstream(bad, std::ios::trunc) << std::string(100, 'x');
  ASSERT_EQ(set_mtime(bad, clock_.now()), 0);
  clock_.advance(4 * kDay);
  ASSERT_EQ(set_mtime(record_path(dir_.path(), test_key(2)), clock_.now()), 0);
  const auto r = store.collect_garbage();
  EXPECT_EQ(r.expired, 2);  // the agent record (3 days) and the unreadable one
  EXPECT_FALSE(stored(1));
  EXPECT_TRUE(stored(2));
}

}  // namespace
}  // namespace dsinfer::kvstore
