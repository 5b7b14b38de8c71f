// `dsinfer kvstore stat|gc|verify` on a store written through the library.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "kvstore/block_store.h"
#include "kvstore_test_util.h"
#include "run_command.h"

namespace dsinfer::kvstore {
namespace {

using testing::block_payload;
using testing::block_tokens;
using testing::TempDir;
using testing::test_key;

test_paths::CommandResult dsinfer(const std::string& args) {
  return test_paths::run_command(std::string(DSINFER_BINARY) + " kvstore " + args + " 2>&1");
}

void fill(const std::string& dir, int agent, int chat) {
  StoreOptions o;
  o.dir = dir;
  BlockStore store(o);
  for (int i = 0; i < agent + chat; ++i) {
    const uint64_t k = test_key(static_cast<uint64_t>(i));
    store.put(k, block_tokens(k), block_payload(k, 1000), i < agent ? TrafficClass::kAgent : TrafficClass::kChat);
  }
  store.flush();
}

TEST(KvStoreCli, StatCountsPerClass) {
  TempDir dir;
  fill(dir.path(), 2, 3);
  const auto r = dsinfer("stat " + dir.path());
  EXPECT_EQ(r.status, 0) << r.out;
  const int64_t record = kRecordHeaderBytes + 128 * 4 + 1000;
  EXPECT_NE(r.out.find("records 5  bytes " + std::to_string(5 * record)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("agent  records 2  bytes " + std::to_string(2 * record)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat   records 3  bytes " + std::to_string(3 * record)), std::string::npos) << r.out;
}

TEST(KvStoreCli, VerifyFailsOnABadRecordAndNamesIt) {
  TempDir dir;
  fill(dir.path(), 0, 4);
  auto r = dsinfer("verify " + dir.path());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("checked 4 records: 0 bad"), std::string::npos) << r.out;
  const std::string bad = record_path(dir.path(), test_key(2));
  std::filesystem::resize_file(bad, 100);
  r = dsinfer("verify " + dir.path());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("BAD " + bad + ": truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checked 4 records: 1 bad"), std::string::npos) << r.out;
}

TEST(KvStoreCli, GcEvictsDownToTheLowWatermark) {
  TempDir dir;
  fill(dir.path(), 0, 10);
  const int64_t record = kRecordHeaderBytes + 128 * 4 + 1000;
  // A cap of 8 records: 10 > 95% of 8 -> evict down to 85% of 8 = 6.8, i.e. 6 records left.
  const auto r = dsinfer("gc " + dir.path() + " --kv-store-bytes " + std::to_string(8 * record));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("evicted 4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("left 6 records"), std::string::npos) << r.out;
}

TEST(KvStoreCli, BadFlagsAreRejected) {
  TempDir dir;
  EXPECT_EQ(dsinfer("gc " + dir.path() + " --kv-ttl agent=3w").status, 1);
  EXPECT_EQ(dsinfer("gc " + dir.path() + " --nope 1").status, 2);
  EXPECT_EQ(dsinfer("stat").status, 2);
  EXPECT_EQ(dsinfer("frobnicate").status, 2);
  const auto help = dsinfer("gc --help");
  EXPECT_EQ(help.status, 0);
  for (const char* flag : {"--kv-store-bytes", "--kv-ttl", "--high-watermark", "--low-watermark", "--scratch-age"}) {
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace dsinfer::kvstore
