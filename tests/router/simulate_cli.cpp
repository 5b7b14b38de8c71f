// `dsinfer simulate` as a user runs it: a trace file and cost curves in, the report out; the generator's
// determinism; the capacity mode's exit status; flag errors.
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_command.h"

namespace dsinfer::router {
namespace {

test_paths::CommandResult simulate(const std::string& args) {
  return test_paths::run_command(std::string(DSINFER_BINARY) + " simulate " + args + " 2>&1");
}

class SimulateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dsinfer_simulate_cli_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    // Constant curves: 1000 prompt tokens/s, 100 generated tokens/s per decode instance, free handoff.
    std::ofstream(dir_ / "costs.json") << R"({"prefill": {"step_tokens": 10000, "tokens_per_s": [[1, 1000]]},
      "decode": {"max_requests": 8, "kv_capacity_tokens": 100000, "tokens_per_s": [[1, 100]]},
      "handoff": {"bytes_per_token": 0, "latency_s": 0}})";
    std::ofstream(dir_ / "trace.jsonl") << R"({"arrival_s": 0, "prompt_tokens": 500, "output_tokens": 3})" << "\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(SimulateCli, TraceAndCostFilesGiveTheHandComputedTimes) {
  const test_paths::CommandResult r = simulate("--trace " + path("trace.jsonl") + " --costs " + path("costs.json") + " --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["completed"], 1);
  // 500 tokens at 1000 tok/s; then 2 decode steps of 1/100 s.
  EXPECT_DOUBLE_EQ(j["ttft_s"]["p50"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["tpot_s"]["p50"].get<double>(), 0.01);
}

TEST_F(SimulateCli, GeneratedTraceIsDeterministicAndWritten) {
  const std::string args = "--prefill 3 --decode 5 --requests 200 --rate 20 --seed 9 --json --write-trace ";
  const test_paths::CommandResult a = simulate(args + path("a.jsonl"));
  const test_paths::CommandResult b = simulate(args + path("b.jsonl"));
  ASSERT_EQ(a.status, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  std::ifstream in(path("a.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 200);
  // The written trace replays to the same report.
  const test_paths::CommandResult c = simulate("--prefill 3 --decode 5 --json --trace " + path("a.jsonl"));
  EXPECT_EQ(c.out, a.out);
}

TEST_F(SimulateCli, CapacityAnswersOrSaysNo) {
  const std::string base = "--costs " + path("costs.json") + " --trace " + path("trace.jsonl") + " --capacity";
  const test_paths::CommandResult ok = simulate(base + " --target-ttft 1 --target-tpot 0.02");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_NE(ok.out.find("smallest cluster: 1P x 1D"), std::string::npos) << ok.out;
  const test_paths::CommandResult no = simulate(base + " --target-ttft 0.1 --max-prefill 4 --max-decode 4");
  EXPECT_EQ(no.status, 3) << no.out;
  EXPECT_NE(no.out.find("no cluster up to 4P x 4D"), std::string::npos) << no.out;
}

TEST_F(SimulateCli, BadFlagsAreErrors) {
  EXPECT_NE(simulate("--decode-policy random").status, 0);
  EXPECT_NE(simulate("--buckets 64K,16K").status, 0);
  EXPECT_NE(simulate("--trace " + path("missing.jsonl")).status, 0);
  const test_paths::CommandResult help = simulate("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--capacity"), std::string::npos);
}

}  // namespace
}  // namespace dsinfer::router
