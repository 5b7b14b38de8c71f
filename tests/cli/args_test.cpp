// The shared model and engine flags: one spelling and one help line each, old spellings as aliases, and
// every size range-checked (an absurd value is a clear error, not an overflow).
#include "cli/args.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "cli/common_flags.h"
#include "core/error.h"

namespace dsinfer::cli {
namespace {

// Parses argv (without the program name) into args; false when parse() asked to exit.
bool parse(Args& args, std::vector<std::string> argv) {
  argv.insert(argv.begin(), "dsinfer");
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  return args.parse(static_cast<int>(ptrs.size()), ptrs.data());
}

Args model_command() {
  Args args("test", "a command with the shared flags");
  add_model_flags(args);
  add_engine_flags(args);
  return args;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const core::Error& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::kInvalidInput);
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(CliFlags, DefaultsAndValues) {
  Args args = model_command();
  ASSERT_TRUE(parse(args, {"--model", "/m", "--threads", "8", "--kv-budget-mib", "1024", "--max-batch-tokens=512",
                           "--no-prefix-cache", "--numerics", "reference", "--no-kv-qdq"}));
  const ModelFlags m = read_model_flags(args);
  EXPECT_EQ(m.dir, "/m");
  EXPECT_EQ(m.threads, 8);
  EXPECT_EQ(m.numerics, "reference");
  EXPECT_FALSE(m.kv_qdq);
  Args fast = model_command();
  ASSERT_TRUE(parse(fast, {"--model", "/m", "--numerics", "fast"}));
  EXPECT_EQ(read_model_flags(fast).numerics, "fast");
  const EngineFlags e = read_engine_flags(args);
  EXPECT_EQ(e.kv_budget_bytes, int64_t{1024} << 20);
  EXPECT_EQ(e.max_batch_tokens, 512);
  EXPECT_EQ(e.max_running, 64);
  EXPECT_EQ(e.max_queue, 4096);
  EXPECT_FALSE(e.prefix_cache);
  EXPECT_TRUE(e.swa_replay);
  EXPECT_FALSE(e.speculation);

  Args defaults = model_command();
  ASSERT_TRUE(parse(defaults, {}));
  EXPECT_EQ(read_engine_flags(defaults).kv_budget_bytes, int64_t{4096} << 20);
  Args exact = model_command();
  ASSERT_TRUE(parse(exact, {"--no-swa-replay"}));
  EXPECT_FALSE(read_engine_flags(exact).swa_replay);
  EXPECT_NE(error_of([&] { read_model_flags(defaults); }).find("missing required flag --model"), std::string::npos);
  EXPECT_TRUE(read_model_flags(defaults, /*required=*/false).dir.empty());
}

TEST(CliFlags, KvStoreFlags) {
  auto command = [] {
    Args args("test", "a command with the KV store flags");
    add_kv_store_flags(args, "$HOME/kvstore");
    return args;
  };
  Args defaults = command();
  ASSERT_TRUE(parse(defaults, {}));
  KvStoreFlags f = read_kv_store_flags(defaults, "/home/kvstore");
  EXPECT_EQ(f.dir, "/home/kvstore");  // serve's default
  EXPECT_EQ(f.capacity_bytes, 0);
  EXPECT_EQ(f.ttl, "agent=3d,chat=7d");
  EXPECT_EQ(f.pool_bytes, int64_t{1} << 30);
  EXPECT_EQ(f.pool_ttl_ns, int64_t{180} * 1'000'000'000);
  EXPECT_EQ(f.gc_interval_ns, int64_t{600} * 1'000'000'000);
  EXPECT_TRUE(read_kv_store_flags(defaults, "").dir.empty());  // generate's default: off

  Args set = command();
  ASSERT_TRUE(parse(set, {"--kv-store", "/mnt/3fs/kv", "--kv-store-bytes", "2G", "--kv-ttl", "agent=1h",
                          "--swa-pool-bytes", "0", "--swa-ttl", "5m", "--kv-gc-interval", "0"}));
  f = read_kv_store_flags(set, "/home/kvstore");
  EXPECT_EQ(f.dir, "/mnt/3fs/kv");
  EXPECT_EQ(f.capacity_bytes, int64_t{2} << 30);
  EXPECT_EQ(f.ttl, "agent=1h");
  EXPECT_EQ(f.pool_bytes, 0);
  EXPECT_EQ(f.pool_ttl_ns, int64_t{300} * 1'000'000'000);
  EXPECT_EQ(f.gc_interval_ns, 0);

  Args off = command();
  ASSERT_TRUE(parse(off, {"--no-kv-store"}));
  EXPECT_TRUE(read_kv_store_flags(off, "/home/kvstore").dir.empty());
  engine::EngineOptions eo;
  apply_kv_store_flags(read_kv_store_flags(off, "/home/kvstore"), eo);
  EXPECT_EQ(eo.kv_connector, nullptr);

  Args both = command();
  ASSERT_TRUE(parse(both, {"--no-kv-store", "--kv-store", "/x"}));
  EXPECT_NE(error_of([&] { read_kv_store_flags(both, ""); }).find("exclude each other"), std::string::npos);
  Args bad_ttl = command();
  ASSERT_TRUE(parse(bad_ttl, {"--kv-ttl", "batch=1d"}));
  EXPECT_ANY_THROW(read_kv_store_flags(bad_ttl, ""));
}

TEST(CliFlags, AbsurdSizesAreClearErrorsNotOverflows) {
  struct Case {
    std::vector<std::string> argv;
    std::string expect;
  };
  const std::vector<Case> cases = {
      // 2^43 MiB << 20 is 2^63: it wrapped to a negative budget.
      {{"--kv-budget-mib", "8796093022208"}, "--kv-budget-mib must be in [1, 16777216], got 8796093022208"},
      {{"--kv-budget-mib", "0"}, "--kv-budget-mib must be in [1, "},
      {{"--kv-budget-mib", "-5"}, "--kv-budget-mib must be in [1, "},
      {{"--kv-budget-mib", "99999999999999999999"}, "--kv-budget-mib expects an integer"},
      // 2^32 + 1 narrowed to int32 was 1.
      {{"--max-batch-tokens", "4294967297"}, "--max-batch-tokens must be in [1, 1048576]"},
      {{"--max-running", "4294967297"}, "--max-running must be in [1, 65536]"},
      {{"--max-queue", "0"}, "--max-queue must be in [1, "},
      {{"--draft-tokens", "1000"}, "--draft-tokens must be in [1, 64]"},
      {{"--threads", "4294967296"}, "--threads must be in [0, 4096]"},
      {{"--numerics", "turbo"}, "--numerics must be exact, reference or fast"},
  };
  for (const auto& c : cases) {
    Args args = model_command();
    std::vector<std::string> argv = c.argv;
    argv.insert(argv.begin(), {"--model", "/m"});
    ASSERT_TRUE(parse(args, argv));
    const std::string msg = error_of([&] {
      read_model_flags(args);
      read_engine_flags(args);
    });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "'" << c.expect << "' not in: " << msg;
  }
  Args args("test", "x");
  args.option("size-mib", "MIB", "a size", "1");
  ASSERT_TRUE(parse(args, {"--size-mib", "9000000000000"}));
  EXPECT_NE(error_of([&] { args.get_mib_as_bytes("size-mib", 1, 1 << 20); }).find("must be in [1, 1048576]"),
            std::string::npos);
}

TEST(CliFlags, OldSpellingsAreAliasesDocumentedOnce) {
  Args args = model_command();
  ASSERT_TRUE(parse(args, {"--kv-budget-mb", "16", "--chunk-size", "64"}));
  EXPECT_EQ(read_engine_flags(args).kv_budget_bytes, int64_t{16} << 20);
  EXPECT_EQ(read_engine_flags(args).max_batch_tokens, 64);

  const std::string help = model_command().usage();
  for (const char* flag : {"--model", "--numerics", "--no-kv-qdq", "--threads", "--kv-budget-mib", "--max-batch-tokens",
                           "--max-running", "--max-queue", "--no-prefix-cache", "--speculation", "--draft-tokens"}) {
    const size_t first = help.find(std::string(flag) + " ");
    const size_t first_eol = help.find(std::string(flag) + "\n");
    const size_t at = std::min(first, first_eol);
    ASSERT_NE(at, std::string::npos) << flag << " not documented:\n" << help;
    EXPECT_EQ(help.find("\n  " + std::string(flag), at + 1), std::string::npos) << flag << " documented twice:\n" << help;
  }
  // The aliases are named on their flag's line, not as lines of their own.
  EXPECT_NE(help.find("(old spelling: --kv-budget-mb)"), std::string::npos) << help;
  EXPECT_NE(help.find("(old spelling: --chunk-size)"), std::string::npos) << help;
  EXPECT_EQ(help.find("\n  --kv-budget-mb"), std::string::npos) << help;

  Args unknown = model_command();
  EXPECT_FALSE(parse(unknown, {"--kv-budget-gb", "1"}));
  EXPECT_EQ(unknown.exit_code(), 2);
}

}  // namespace
}  // namespace dsinfer::cli
