// `dsinfer recipe run|check`: the deepseek-recipe golden corpus format (tests/data/recipe/README.md).
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "cli/args.h"
#include "cli/command.h"
#include "core/error.h"
#include "recipe/golden.h"
#include "recipe/tokenizer_loader.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::cli {
namespace {

struct Corpus {
  std::vector<recipe::Json> records;
};

Corpus read_corpus(const std::string& path) {
  std::ifstream in(path);
  DSINFER_CHECK(in.good(), "cannot open corpus ", path);
  Corpus corpus;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    try {
      corpus.records.push_back(recipe::parse_json(line));
    } catch (const std::exception& e) {
      core::fail(path, ":", n, ": not JSON: ", e.what());
    }
  }
  return corpus;
}

// Tokenizers loaded on first use; a failure is remembered and reported in the records that need it.
class Tokenizers {
 public:
  explicit Tokenizers(recipe::TokenizerSources sources) : sources_(std::move(sources)) {}
  const tokenizer::Tokenizer* get(std::string_view name) {
    const std::string key(name);
    if (auto it = loaded_.find(key); it != loaded_.end()) return it->second.get();
    if (failed_.count(key)) return nullptr;
    try {
      loaded_[key] = recipe::load_deepseek_tokenizer(name, sources_);
      return loaded_[key].get();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dsinfer recipe: %s\n", e.what());
      failed_[key] = e.what();
      return nullptr;
    }
  }

 private:
  recipe::TokenizerSources sources_;
  std::map<std::string, std::unique_ptr<tokenizer::Tokenizer>> loaded_;
  std::map<std::string, std::string> failed_;
};

void declare_common(Args& args) {
  args.option("corpus", "FILE", "corpus.jsonl: one record per line");
  args.option("npm-base", "FILE", "DeepSeek V3 tokenizer.json to build the V4/V4.1 tokenizers from when none are built");
  args.option("name", "TEXT", "only records whose name contains TEXT");
}

bool selected(const Args& args, const recipe::Json& record) {
  const auto filter = args.get_optional("name");
  return !filter || record.value("name", std::string()).find(*filter) != std::string::npos;
}

int run_recipe(int argc, char** argv) {
  const std::string sub = argc >= 2 ? argv[1] : "";
  if (sub != "run" && sub != "check") {
    std::fprintf(stderr,
                 "usage: dsinfer recipe run --corpus FILE            print one golden-format line per record\n"
                 "       dsinfer recipe check --corpus C --golden G  compare with goldens, end with 'N passed, M failed'\n");
    return sub == "--help" ? 0 : 2;
  }
  Args args("recipe " + sub, sub == "run" ? "Run every corpus record and print one golden-format JSON line per result."
                                          : "Run every corpus record and compare with the golden lines of the same name.");
  declare_common(args);
  if (sub == "check") args.option("golden", "FILE", "rust.jsonl: the expected lines");
  if (!args.parse(argc - 1, argv + 1)) return args.exit_code();

  const Corpus corpus = read_corpus(args.get("corpus"));
  recipe::TokenizerSources sources;
  sources.npm_base = args.get_optional("npm-base");
  Tokenizers tokenizers(sources);
  recipe::GoldenEnvironment env;
  env.tokenizer = [&](std::string_view name) { return tokenizers.get(name); };

  if (sub == "run") {
    for (const auto& record : corpus.records)
      if (selected(args, record)) std::printf("%s\n", recipe::run_golden_record(record, env).c_str());
    return 0;
  }

  std::map<std::string, std::string> expected;
  {
    const std::string path = args.get("golden");
    std::ifstream in(path);
    DSINFER_CHECK(in.good(), "cannot open goldens ", path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      expected[recipe::parse_json(line).value("name", std::string())] = line;
    }
  }
  int passed = 0, failed = 0;
  for (const auto& record : corpus.records) {
    if (!selected(args, record)) continue;
    const std::string name = record.value("name", std::string());
    const auto it = expected.find(name);
    if (it == expected.end()) {
      std::printf("FAIL %s: no golden line with this name\n", name.c_str());
      ++failed;
      continue;
    }
    const std::string diff = recipe::golden_difference(it->second, recipe::run_golden_record(record, env));
    if (diff.empty()) {
      ++passed;
    } else {
      std::printf("FAIL %s: %s\n", name.c_str(), diff.c_str());
      ++failed;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace
DSINFER_COMMAND("recipe", "run or check deepseek-recipe golden corpora (recipe run|check)", run_recipe);
}  // namespace dsinfer::cli
