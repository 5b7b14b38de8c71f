#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>

#include "kvstore/block_store.h"
#include "kvstore/inspect.h"
#include "kvstore/record.h"
#include "kvstore_test_util.h"

namespace dsinfer::kvstore {
namespace {

using testing::block_payload;
using testing::block_tokens;
using testing::FakeClock;
using testing::kDay;
using testing::TempDir;
using testing::test_key;

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}
bool exists(const std::string& path) { return std::filesystem::exists(path); }

LoadResult load(BlockStore& store, uint64_t key, std::vector<int32_t> tokens) {
  return store.load(LoadRequest{key, std::move(tokens)}).get();
}
LoadResult load(BlockStore& store, uint64_t key) { return load(store, key, block_tokens(key)); }

class KvBlockStore : public ::testing::TestWithParam<ReadBackend> {
 protected:
  StoreOptions options() {
    StoreOptions o;
    o.dir = dir_.path() + "/store";
    o.read_backend = GetParam();
    o.clock = clock_.clock();
    return o;
  }
  TempDir dir_;
  FakeClock clock_;
};

TEST_P(KvBlockStore, RoundTrip) {
  BlockStore store(options());
  if (GetParam() == ReadBackend::kUring) std::printf("read backend: %s\n", store.read_backend_name());
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_TRUE(store.put(test_key(i), block_tokens(test_key(i)), block_payload(test_key(i), 1000 + i),
                          i % 2 ? TrafficClass::kChat : TrafficClass::kAgent));
  }
  store.flush();
  EXPECT_EQ(store.stats().records_written.load(), 20);
  for (uint64_t i = 0; i < 20; ++i) {
    const auto r = load(store, test_key(i));
    ASSERT_TRUE(r.hit()) << i;
    const auto expected = block_payload(test_key(i), 1000 + i);
    ASSERT_EQ(r.payload_size, expected.size());
    EXPECT_EQ(std::memcmp(r.payload().data(), expected.data(), expected.size()), 0);
    EXPECT_EQ(r.traffic_class, i % 2 ? TrafficClass::kChat : TrafficClass::kAgent);
  }
  EXPECT_FALSE(load(store, test_key(999)).hit());
  EXPECT_EQ(store.stats().hits.load(), 20);
  EXPECT_EQ(store.stats().misses.load(), 1);
  EXPECT_GT(store.stats().bytes_read.load(), 20 * 1000);
}

TEST_P(KvBlockStore, BatchOfCallbacks) {
  BlockStore store(options());
  for (uint64_t i = 0; i < 100; i += 2) store.put(test_key(i), block_tokens(test_key(i)), block_payload(i), TrafficClass::kChat);
  store.flush();
  std::mutex m;
  std::vector<int> hit(100, -1);
  std::latch all(100);
  std::vector<LoadRequest> batch;
  for (uint64_t i = 0; i < 100; ++i) batch.push_back(LoadRequest{test_key(i), block_tokens(test_key(i))});
  store.load_batch(std::move(batch), [&](LoadResult r) {
    {
      std::lock_guard<std::mutex> lock(m);
      for (uint64_t i = 0; i < 100; ++i) {
        if (test_key(i) == r.key) hit[i] = r.hit() ? 1 : 0;
      }
    }
    all.count_down();
  });
  all.wait();
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(hit[i], i % 2 == 0 ? 1 : 0) << i;
  EXPECT_EQ(store.stats().loads.load(), 100);
}

// Each corruption of the file on disk: the load is a miss, the file is removed, and nothing crashes.
TEST_P(KvBlockStore, EveryCorruptionIsAMissAndRemovesTheFile) {
  const uint64_t key = test_key(7);
  const uint64_t parent = 12345;
  const auto good = encode_record(key, block_tokens(key), block_payload(key), TrafficClass::kChat, 1, parent);
  std::vector<std::pair<std::string, std::vector<uint8_t>>> cases;
  for (size_t len : {size_t{0}, size_t{10}, size_t{64}, size_t{600}, good.size() - 1}) {
    cases.push_back({"truncated to " + std::to_string(len), {good.begin(), good.begin() + len}});
  }
  for (size_t byte : {size_t{0}, size_t{5}, size_t{9}, size_t{30}, size_t{60}, size_t{100}, good.size() / 2,
                      good.size() - 1}) {
    auto b = good;
    b[byte] ^= 0x04;
    cases.push_back({"bit flipped in byte " + std::to_string(byte), b});
  }
  cases.push_back({"another key's record", encode_record(key + 1, block_tokens(key), block_payload(key),
                                                         TrafficClass::kChat, 1)});
  auto other_tokens = block_tokens(key);
  other_tokens[3] = 5;
  cases.push_back({"other tokens", encode_record(key, other_tokens, block_payload(key), TrafficClass::kChat, 1)});
  cases.push_back({"another parent", encode_record(key, block_tokens(key), block_payload(key), TrafficClass::kChat, 1,
                                                  999)});
  auto v2 = good;
  v2[4] = 2;
  cases.push_back({"version 2", v2});
  auto longer = good;
  longer.resize(good.size() + 100);
  cases.push_back({"trailing bytes", longer});

  BlockStore store(options());
  std::filesystem::create_directories(record_dir(store.dir(), key));
  const std::string path = record_path(store.dir(), key);
  auto load_checked = [&] { return store.load(LoadRequest{key, block_tokens(key), parent}).get(); };
  for (const auto& [name, bytes] : cases) {
    write_file(path, bytes);
    const auto r = load_checked();
    EXPECT_EQ(r.outcome, LoadOutcome::kRejected) << name;
    EXPECT_FALSE(exists(path)) << name;
    EXPECT_EQ(load_checked().outcome, LoadOutcome::kMiss) << name;
  }
  EXPECT_EQ(store.stats().rejected.load(), static_cast<int64_t>(cases.size()));
  EXPECT_EQ(store.stats().hits.load(), 0);
  write_file(path, good);
  EXPECT_TRUE(load_checked().hit());
}

TEST_P(KvBlockStore, AHitRefreshesTheLastUseTime) {
  BlockStore store(options());
  const uint64_t key = test_key(1);
  store.put(key, block_tokens(key), block_payload(key), TrafficClass::kAgent);
  store.flush();
  struct stat st;
  ASSERT_EQ(::stat(record_path(store.dir(), key).c_str(), &st), 0);
  EXPECT_EQ(mtime_ns_of(st), clock_.now());
  clock_.advance(kDay);
  ASSERT_TRUE(load(store, key).hit());
  ASSERT_EQ(::stat(record_path(store.dir(), key).c_str(), &st), 0);
  EXPECT_EQ(mtime_ns_of(st), clock_.now());
}

TEST_P(KvBlockStore, ReadErrorsAreMissesThatKeepTheFile) {
  auto o = options();
  o.faults = [](IoOp op, const std::string&) { return op == IoOp::kRead ? EIO : 0; };
  BlockStore store(o);
  const uint64_t key = test_key(3);
  store.put(key, block_tokens(key), block_payload(key), TrafficClass::kAgent);
  store.flush();
  EXPECT_EQ(load(store, key).outcome, LoadOutcome::kError);
  EXPECT_TRUE(exists(record_path(store.dir(), key)));
  EXPECT_EQ(store.stats().read_errors.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, KvBlockStore, ::testing::Values(ReadBackend::kUring, ReadBackend::kPread),
                         [](const auto& info) { return info.param == ReadBackend::kUring ? "uring" : "pread"; });

TEST(KvBlockStoreWrites, MissingDirectoryIsCreated) {
  TempDir dir;
  StoreOptions o;
  o.dir = dir.path() + "/not/yet/there";
  BlockStore store(o);
  EXPECT_TRUE(std::filesystem::is_directory(o.dir));
  ASSERT_TRUE(store.put(test_key(0), block_tokens(test_key(0)), block_payload(0), TrafficClass::kChat));
  store.flush();
  EXPECT_TRUE(load(store, test_key(0)).hit());
}

TEST(KvBlockStoreWrites, UncreatableDirectoryDisablesWritesAndReadsMiss) {
  TempDir dir;
  write_file(dir.path() + "/file", {1});
  FakeClock clock;
  StoreOptions o;
  o.dir = dir.path() + "/file/store";  // below a regular file: ENOTDIR
  o.clock = clock.clock();
  BlockStore store(o);
  EXPECT_FALSE(store.writes_enabled());
  EXPECT_FALSE(store.put(test_key(0), block_tokens(test_key(0)), block_payload(0), TrafficClass::kChat));
  EXPECT_EQ(load(store, test_key(0)).outcome, LoadOutcome::kError);
}

TEST(KvBlockStoreWrites, SecondPutOfAStoredKeyOnlyRefreshesIt) {
  TempDir dir;
  FakeClock clock;
  StoreOptions o;
  o.dir = dir.path();
  o.clock = clock.clock();
  BlockStore store(o);
  const uint64_t key = test_key(2);
  store.put(key, block_tokens(key), block_payload(key), TrafficClass::kChat);
  store.flush();
  clock.advance(kDay);
  store.put(key, block_tokens(key), block_payload(key), TrafficClass::kChat);
  store.flush();
  EXPECT_EQ(store.stats().records_written.load(), 1);
  EXPECT_EQ(store.stats().writes_existing.load(), 1);
  struct stat st;
  ASSERT_EQ(::stat(record_path(o.dir, key).c_str(), &st), 0);
  EXPECT_EQ(mtime_ns_of(st), clock.now());
}

// The writer is held inside its first write; the queue (2 records) fills; further puts return false at
// once and are counted, and nothing queued is lost.
TEST(KvBlockStoreWrites, FullQueueDropsWritesWithoutBlocking) {
  TempDir dir;
  std::mutex m;
  std::condition_variable cv;
  bool entered = false, release = false;
  StoreOptions o;
  o.dir = dir.path();
  o.max_queued_writes = 2;
  o.faults = [&](IoOp op, const std::string&) {
    if (op == IoOp::kCreateTemp) {
      std::unique_lock<std::mutex> lock(m);
      entered = true;
      cv.notify_all();
      cv.wait(lock, [&] { return release; });
    }
    return 0;
  };
  BlockStore store(o);
  ASSERT_TRUE(store.put(test_key(0), block_tokens(test_key(0)), block_payload(0), TrafficClass::kChat));
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return entered; });
  }
  EXPECT_TRUE(store.put(test_key(1), block_tokens(test_key(1)), block_payload(1), TrafficClass::kChat));
  EXPECT_TRUE(store.put(test_key(2), block_tokens(test_key(2)), block_payload(2), TrafficClass::kChat));
  EXPECT_FALSE(store.put(test_key(3), block_tokens(test_key(3)), block_payload(3), TrafficClass::kChat));
  EXPECT_FALSE(store.put(test_key(4), block_tokens(test_key(4)), block_payload(4), TrafficClass::kChat));
  EXPECT_EQ(store.stats().dropped_writes.load(), 2);
  {
    std::lock_guard<std::mutex> lock(m);
    release = true;
  }
  cv.notify_all();
  store.flush();
  EXPECT_EQ(store.stats().records_written.load(), 3);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_EQ(load(store, test_key(i)).hit(), i < 3) << i;
}

// ENOSPC, then EIO: writes stop for a doubling backoff, the caller is never blocked or failed, reads
// go on, and writes resume (backoff reset) once the disk works again.
TEST(KvBlockStoreWrites, DiskFaultsDisableWritesThenRecover) {
  TempDir dir;
  FakeClock clock;
  std::atomic<int> fault{0};
  StoreOptions o;
  o.dir = dir.path();
  o.clock = clock.clock();
  o.backoff_initial_ns = 10 * kNsPerSecond;
  o.faults = [&](IoOp op, const std::string&) { return op == IoOp::kWrite ? fault.load() : 0; };
  BlockStore store(o);
  ASSERT_TRUE(store.put(test_key(0), block_tokens(test_key(0)), block_payload(0), TrafficClass::kChat));
  store.flush();

  fault = ENOSPC;
  ASSERT_TRUE(store.put(test_key(1), block_tokens(test_key(1)), block_payload(1), TrafficClass::kChat));
  store.flush();
  EXPECT_EQ(store.stats().write_errors.load(), 1);
  EXPECT_FALSE(store.writes_enabled());
  EXPECT_FALSE(store.put(test_key(2), block_tokens(test_key(2)), block_payload(2), TrafficClass::kChat));
  EXPECT_EQ(store.stats().dropped_disabled.load(), 1);
  EXPECT_TRUE(load(store, test_key(0)).hit());  // reads are unaffected
  EXPECT_FALSE(load(store, test_key(1)).hit());

  clock.advance(10 * kNsPerSecond + 1);  // first backoff over; the disk now fails with EIO
  fault = EIO;
  EXPECT_TRUE(store.writes_enabled());
  ASSERT_TRUE(store.put(test_key(3), block_tokens(test_key(3)), block_payload(3), TrafficClass::kChat));
  store.flush();
  EXPECT_EQ(store.stats().write_errors.load(), 2);
  clock.advance(10 * kNsPerSecond + 1);
  EXPECT_FALSE(store.writes_enabled()) << "the second backoff doubles to 20 s";
  clock.advance(10 * kNsPerSecond);

  fault = 0;
  ASSERT_TRUE(store.writes_enabled());
  ASSERT_TRUE(store.put(test_key(4), block_tokens(test_key(4)), block_payload(4), TrafficClass::kChat));
  store.flush();
  EXPECT_TRUE(load(store, test_key(4)).hit());
  EXPECT_EQ(scan_store(o.dir).size(), 2u) << "no temp file left behind by the failed writes";
  // Recovered: the next fault starts again from the initial backoff.
  fault = ENOSPC;
  store.put(test_key(5), block_tokens(test_key(5)), block_payload(5), TrafficClass::kChat);
  store.flush();
  clock.advance(10 * kNsPerSecond + 1);
  EXPECT_TRUE(store.writes_enabled());
}

// A real full file system: a 1 MiB tmpfs. Needs CAP_SYS_ADMIN (root in most CI containers).
TEST(KvBlockStoreWrites, RealFullTmpfsDisablesWritesAndLeavesNoBadRecord) {
  TempDir dir;
  const std::string mnt = dir.path() + "/mnt";
  std::filesystem::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno) << "): needs root / CAP_SYS_ADMIN";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mnt};
  FakeClock clock;
  {
    StoreOptions o;
    o.dir = mnt + "/store";
    o.clock = clock.clock();
    BlockStore store(o);
    int accepted = 0;
    for (uint64_t i = 0; i < 8; ++i) {
      if (store.put(test_key(i), block_tokens(test_key(i)), block_payload(i, 300 << 10), TrafficClass::kChat)) {
        ++accepted;
      }
      store.flush();
    }
    EXPECT_GE(store.stats().write_errors.load(), 1);
    EXPECT_FALSE(store.writes_enabled());
    EXPECT_LT(store.stats().records_written.load(), 4);
    EXPECT_EQ(accepted, store.stats().records_written.load() + 1) << "after the first failure puts are refused";
    int64_t checked = 0;
    EXPECT_TRUE(verify_store(o.dir, &checked).empty());
    EXPECT_EQ(checked, store.stats().records_written.load());
    for (const auto& f : scan_store(o.dir)) EXPECT_FALSE(f.scratch) << f.path;
    // Room again (the collector evicts under a cap), and the backoff over: writes resume.
    EXPECT_GT(store.collect_garbage(1).evicted, 0);
    clock.advance(store.stats().write_errors.load() * 600 * kNsPerSecond);
    ASSERT_TRUE(store.put(test_key(20), block_tokens(test_key(20)), block_payload(20, 300 << 10), TrafficClass::kChat));
    store.flush();
    EXPECT_TRUE(load(store, test_key(20)).hit());
  }
}

}  // namespace
}  // namespace dsinfer::kvstore
