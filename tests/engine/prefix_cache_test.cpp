#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>

namespace dsinfer::engine {
namespace {

struct FakeBlock : KvBlock {
  explicit FakeBlock(int i) : id(i) {}
  int id;
};
struct FakeSnapshot : WindowSnapshot {
  explicit FakeSnapshot(int64_t p) : pos(p) {}
  int64_t position() const override { return pos; }
  int64_t bytes() const override { return 50; }
  int64_t pos;
};

std::vector<int32_t> seq(int n, int start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Inserts the full blocks of `tokens` as one request would, returning the chain (acquired).
std::vector<uint64_t> publish(PrefixCache& c, const std::vector<int32_t>& tokens, int64_t bytes = 100) {
  std::vector<uint64_t> chain;
  const int B = c.block_tokens();
  for (size_t b = 0; (b + 1) * B <= tokens.size(); ++b) {
    auto [h, inserted] = c.insert(chain.empty() ? c.root() : chain.back(),
                                  std::span<const int32_t>(tokens.data() + b * B, B),
                                  std::make_shared<FakeBlock>(static_cast<int>(b)), bytes);
    EXPECT_NE(h, 0u);
    chain.push_back(h);
  }
  return chain;
}

TEST(PrefixCache, ChainHashDependsOnTheWholePrefix) {
  const auto a = seq(4), b = seq(4, 1);
  const uint64_t r1 = prefix_root_hash("model", "layout"), r2 = prefix_root_hash("model2", "layout");
  EXPECT_NE(r1, r2);
  EXPECT_NE(prefix_root_hash("model", "layout"), prefix_root_hash("model", "layout2"));
  EXPECT_EQ(chain_hash(r1, a), chain_hash(r1, a));
  EXPECT_NE(chain_hash(r1, a), chain_hash(r1, b));
  EXPECT_NE(chain_hash(r1, a), chain_hash(r2, a));
  EXPECT_NE(chain_hash(chain_hash(r1, a), a), chain_hash(chain_hash(r1, b), a));
}

TEST(PrefixCache, LongestPrefixMatchInFullBlocks) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 1 << 20);
  auto tokens = seq(14);  // 3 full blocks + 2
  auto chain = publish(c, tokens);
  ASSERT_EQ(chain.size(), 3u);
  for (uint64_t h : chain) c.release(h);
  auto m = c.match(tokens, 100);
  EXPECT_EQ(m.nodes.size(), 3u);
  EXPECT_EQ(m.nodes, chain);
  auto other = tokens;
  other[9] = 999;  // inside block 2
  EXPECT_EQ(c.match(other, 100).nodes.size(), 2u);
  other[1] = 999;  // inside block 0
  EXPECT_EQ(c.match(other, 100).nodes.size(), 0u);
  EXPECT_EQ(c.match(tokens, 2).nodes.size(), 2u);
  EXPECT_EQ(c.match(std::vector<int32_t>(tokens.begin(), tokens.begin() + 7), 100).nodes.size(), 1u);
}

TEST(PrefixCache, DuplicateInsertSharesTheNode) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 1 << 20);
  auto tokens = seq(8);
  auto a = publish(c, tokens);
  const int64_t bytes = c.bytes();
  auto [h, inserted] = c.insert(c.root(), std::span<const int32_t>(tokens.data(), 4), std::make_shared<FakeBlock>(9), 100);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(h, a[0]);
  EXPECT_EQ(c.bytes(), bytes);
  c.release(h);
  for (uint64_t x : a) c.release(x);
  EXPECT_EQ(c.evictable_bytes(), bytes);
}

TEST(PrefixCache, EvictsOnlyUnreferencedLeavesLeastRecentlyUsedFirst) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 1 << 20);
  auto x = seq(12, 0), y = seq(12, 100);
  auto cx = publish(c, x), cy = publish(c, y);
  EXPECT_EQ(c.bytes(), 600);
  EXPECT_EQ(c.evictable_bytes(), 0);
  EXPECT_EQ(c.evict(1000), 0);  // everything referenced
  for (uint64_t h : cy) c.release(h);
  for (uint64_t h : cx) c.release(h);
  EXPECT_EQ(c.evictable_bytes(), 600);
  c.match(y, 100);  // y is now the most recently used
  EXPECT_EQ(c.evict(100), 100);
  // x's deepest block went first; x's first two blocks remain, y untouched.
  EXPECT_EQ(c.match(x, 100).nodes.size(), 2u);
  EXPECT_EQ(c.match(y, 100).nodes.size(), 3u);
  // A referenced node protects its ancestors: hold y's last block and evict everything else.
  auto m = c.match(y, 100);
  for (uint64_t h : m.nodes) c.acquire(h);
  c.evict(10000);
  EXPECT_EQ(c.match(x, 100).nodes.size(), 0u);
  EXPECT_EQ(c.match(y, 100).nodes.size(), 3u);
  EXPECT_EQ(c.bytes(), 300);
  EXPECT_EQ(c.evicted_blocks_total(), 3);
}

TEST(PrefixCache, CapacityIsEnforcedOnUnreferencedNodes) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 250);
  auto x = seq(12);
  auto cx = publish(c, x);
  EXPECT_EQ(c.bytes(), 300);  // over capacity but referenced
  c.release(cx[2]);
  EXPECT_EQ(c.bytes(), 200);  // the now-free leaf was evicted at once
  c.release(cx[1]);
  c.release(cx[0]);
  EXPECT_EQ(c.bytes(), 200);
}

TEST(PrefixCache, SnapshotsTravelWithTheirNode) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 1 << 20);
  auto x = seq(12);
  auto cx = publish(c, x);
  EXPECT_TRUE(c.set_snapshot(cx[1], std::make_shared<FakeSnapshot>(8), 50));
  EXPECT_FALSE(c.set_snapshot(cx[1], std::make_shared<FakeSnapshot>(8), 50));
  EXPECT_EQ(c.bytes(), 350);
  EXPECT_EQ(c.snapshots(), 1);
  auto m = c.match(x, 100);
  ASSERT_EQ(m.snapshots.size(), 3u);
  EXPECT_EQ(m.snapshots[0], nullptr);
  ASSERT_NE(m.snapshots[1], nullptr);
  EXPECT_EQ(m.snapshots[1]->position(), 8);
  for (uint64_t h : cx) c.release(h);
  c.evict(10000);
  EXPECT_EQ(c.bytes(), 0);
  EXPECT_EQ(c.snapshots(), 0);
}

TEST(PrefixCache, InsertUnderAMissingParentIsRefused) {
  PrefixCache c(prefix_root_hash("m", "l"), 4, 1 << 20);
  auto x = seq(4);
  auto [h, inserted] = c.insert(12345, x, std::make_shared<FakeBlock>(0), 100);
  EXPECT_EQ(h, 0u);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(c.bytes(), 0);
}

}  // namespace
}  // namespace dsinfer::engine
