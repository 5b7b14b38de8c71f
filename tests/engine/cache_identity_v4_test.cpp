// The prefix-cache seed of the DeepSeek-V4 runner names the SIMD target: every target computes other
// bits (tests/model/deepseek_v4/cross_target_test.cpp), so cached blocks and window snapshots made on
// one must never be resumed on another (a cache shared across machines, or a persisted one).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include <unistd.h>

#include "engine/deepseek_v4/v4_runner.h"
#include "engine/prefix_cache.h"
#include "kernels/cpu/linear_bf16dot.h"
#include "kernels/cpu/targets.h"
#include "model/mkmodel.h"
#include "model/numerics_revision.h"

namespace dsinfer::engine {
namespace {

TEST(CacheIdentityV4, PrefixSeedDiffersPerSimdTarget) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("dsinfer-cache-identity-test-" + std::to_string(::getpid()))).string();
  model::MkModelOptions o;
  o.config_path = std::string(DSINFER_SOURCE_DIR) + "/tests/engine/tiny_vocab4096.json";
  o.seed = 1;
  o.out_dir = dir;
  model::make_model(o);
  const auto targets = kernels::available_targets();
  ASSERT_FALSE(targets.empty());
  std::set<uint64_t> roots;
  for (const auto& t : targets) {
    kernels::ScopedTarget scope(t);
    const ModelInfo info = open_model(dir)->info();
    EXPECT_NE(info.cache_layout.find("simd " + t.name), std::string::npos) << info.cache_layout;
    roots.insert(prefix_root_hash(info.identity, info.cache_layout));
    // The same target again: the same seed (the cache still works within one machine).
    EXPECT_EQ(prefix_root_hash(info.identity, info.cache_layout),
              prefix_root_hash(open_model(dir)->info().identity, open_model(dir)->info().cache_layout));
  }
  EXPECT_EQ(roots.size(), targets.size());
  std::filesystem::remove_all(dir);
}

// The seed also names the numerics revision and whether fast numerics run on bf16 dots: a store shared
// by CPUs with and without AVX-512 BF16, or persisted by a build of other numerics, is not resumed.
TEST(CacheIdentityV4, PrefixSeedNamesTheNumericsRevisionAndTheBf16Dots) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("dsinfer-cache-identity-bf16-test-" + std::to_string(::getpid()))).string();
  model::MkModelOptions o;
  o.config_path = std::string(DSINFER_SOURCE_DIR) + "/tests/engine/tiny_vocab4096.json";
  o.seed = 1;
  o.out_dir = dir;
  model::make_model(o);
  const ModelInfo info = open_model(dir)->info();
  EXPECT_NE(info.cache_layout.find("numerics revision " + std::to_string(model::kNumericsRevision)), std::string::npos)
      << info.cache_layout;
  const bool hw = kernels::bf16dot_hardware();
  EXPECT_NE(info.cache_layout.find(hw ? "bf16 dots on" : "bf16 dots off"), std::string::npos) << info.cache_layout;
  if (hw) {
    kernels::detail::set_bf16dot_hw_allowed(false);
    const ModelInfo without = open_model(dir)->info();
    kernels::detail::set_bf16dot_hw_allowed(true);
    EXPECT_NE(without.cache_layout.find("bf16 dots off"), std::string::npos) << without.cache_layout;
    EXPECT_NE(prefix_root_hash(info.identity, info.cache_layout),
              prefix_root_hash(without.identity, without.cache_layout));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dsinfer::engine
