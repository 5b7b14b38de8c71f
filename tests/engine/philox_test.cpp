#include "engine/philox.h"

#include <gtest/gtest.h>

namespace dsinfer::engine {
namespace {

// Known-answer vectors of Philox4x32-10 published with the Random123 library (kat_vectors).
TEST(Philox, KnownAnswers) {
  {
    Philox p(0);
    EXPECT_EQ(p.block({0, 0, 0, 0}), (Philox::Counter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  }
  {
    Philox p(0xffffffffffffffffull);
    EXPECT_EQ(p.block({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}),
              (Philox::Counter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  }
  {
    Philox p(0x299f31d0a4093822ull);  // key words {0xa4093822, 0x299f31d0}
    EXPECT_EQ(p.block({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}),
              (Philox::Counter{0xd16cfe09u, 0x94fdcceb, 0x5001e420u, 0x24126ea1u}));
  }
}

TEST(Philox, UniformIsInRangeAndSpread) {
  Philox p(42);
  double sum = 0;
  int buckets[10] = {};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = p.uniform(static_cast<uint64_t>(i), 0, 0);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++buckets[static_cast<int>(u * 10)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  for (int b : buckets) EXPECT_NEAR(b, n / 10, 500);
}

TEST(Philox, CounterFieldsGiveDistinctStreams) {
  Philox p(1);
  EXPECT_NE(p.uniform(5, 0, 0), p.uniform(5, 1, 0));
  EXPECT_NE(p.uniform(5, 0, 0), p.uniform(5, 0, 1));
  EXPECT_NE(p.uniform(5, 0, 0), p.uniform(6, 0, 0));
  EXPECT_EQ(p.uniform(5, 2, 3), Philox(1).uniform(5, 2, 3));
}

}  // namespace
}  // namespace dsinfer::engine
