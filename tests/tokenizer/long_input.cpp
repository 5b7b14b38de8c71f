// Very long inputs (10 MB each): one huge word for every kind of pre-tokenizer piece, invalid bytes,
// and mixed text with the pool. They must encode without error, decode back to the (lossy-decoded)
// input, and give the same ids with and without segment parallelism. Label "long".
#include <gtest/gtest.h>

#include <random>

#include "core/thread_pool.h"
#include "text_corpus.h"
#include "tokenizer/utf8.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

constexpr size_t kTen = 10 * 1000 * 1000;

std::string repeat(const std::string& unit, size_t bytes) {
  std::string s;
  s.reserve(bytes + unit.size());
  while (s.size() < bytes) s += unit;
  return s;
}

void check(const std::string& name, const std::string& text) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  const auto ids = t.encode(text);
  EXPECT_FALSE(ids.empty()) << name;
  EXPECT_TRUE(t.decode(ids) == utf8::lossy(text)) << name << ": decode(encode(text)) differs";
  core::ThreadPool pool(2);
  EncodeOptions o;
  o.pool = &pool;
  EXPECT_TRUE(t.encode(text, o) == ids) << name << ": parallel encode differs";
}

TEST(LongInput, OneHugeLetterWord) { check("letters", std::string(kTen, 'a')); }
TEST(LongInput, OneHugeSpaceRun) { check("spaces", std::string(kTen, ' ')); }
TEST(LongInput, OneHugeNewlineRun) { check("newlines", std::string(kTen, '\n')); }
TEST(LongInput, DigitRun) { check("digits", repeat("1234567890", kTen)); }
TEST(LongInput, OneHugeCjkRun) { check("cjk", repeat("中文测试", kTen)); }
TEST(LongInput, PunctuationRun) { check("punctuation", repeat("!?.", kTen)); }
TEST(LongInput, RandomBytes) {
  std::mt19937 rng(1);
  std::string s(kTen, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  check("random bytes", s);
}
TEST(LongInput, MixedText) {
  std::mt19937 rng(2);
  std::string s;
  while (s.size() < kTen) s += testing::soup(rng, 1000);
  check("mixed", s);
}

}  // namespace
}  // namespace dsinfer::tokenizer
