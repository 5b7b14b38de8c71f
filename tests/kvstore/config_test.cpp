#include <gtest/gtest.h>

#include "core/error.h"
#include "kvstore/config.h"

namespace dsinfer::kvstore {
namespace {

constexpr int64_t kDayNs = 86400 * kNsPerSecond;

TEST(KvConfig, DefaultTtlsAreThreeAndSevenDays) {
  const TtlPolicy p;
  EXPECT_EQ(p.ttl(TrafficClass::kAgent), 3 * kDayNs);
  EXPECT_EQ(p.ttl(TrafficClass::kChat), 7 * kDayNs);
}

TEST(KvConfig, ParsesTtlSpec) {
  const TtlPolicy p = parse_ttl_policy("agent=90m,chat=2d");
  EXPECT_EQ(p.ttl(TrafficClass::kAgent), 90 * 60 * kNsPerSecond);
  EXPECT_EQ(p.ttl(TrafficClass::kChat), 2 * kDayNs);
  // A class not named keeps its default.
  const TtlPolicy q = parse_ttl_policy("chat=12h");
  EXPECT_EQ(q.ttl(TrafficClass::kAgent), 3 * kDayNs);
  EXPECT_EQ(q.ttl(TrafficClass::kChat), 12 * 3600 * kNsPerSecond);
  EXPECT_EQ(parse_ttl_policy("agent=30").ttl(TrafficClass::kAgent), 30 * kNsPerSecond);
}

TEST(KvConfig, RejectsBadTtlSpecs) {
  EXPECT_THROW(parse_ttl_policy("agent"), core::Error);
  EXPECT_THROW(parse_ttl_policy("batch=3d"), core::Error);
  EXPECT_THROW(parse_ttl_policy("agent=3w"), core::Error);
  EXPECT_THROW(parse_ttl_policy("agent=-1d"), core::Error);
  EXPECT_THROW(parse_ttl_policy("agent=0"), core::Error);
  EXPECT_THROW(parse_ttl_policy("agent=99999999999999d"), core::Error);
}

TEST(KvConfig, ParsesByteSizes) {
  EXPECT_EQ(parse_byte_size("1000"), 1000);
  EXPECT_EQ(parse_byte_size("4k"), 4096);
  EXPECT_EQ(parse_byte_size("512M"), int64_t{512} << 20);
  EXPECT_EQ(parse_byte_size("2G"), int64_t{2} << 30);
  EXPECT_EQ(parse_byte_size("3T"), int64_t{3} << 40);
  EXPECT_THROW(parse_byte_size("2GB"), core::Error);
  EXPECT_THROW(parse_byte_size(""), core::Error);
  EXPECT_THROW(parse_byte_size("99999999999T"), core::Error);
}

}  // namespace
}  // namespace dsinfer::kvstore
