#include <gtest/gtest.h>

#include <random>

#include "core/thread_pool.h"
#include "text_corpus.h"
#include "tokenizer/utf8.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

using V = std::vector<int32_t>;

const Tokenizer& v41() { return testing::deepseek(DeepseekVersion::kV41); }

TEST(Encode, EmptyInput) {
  EXPECT_EQ(v41().encode(""), V{});
  EXPECT_EQ(v41().encode_plain(""), V{});
  EXPECT_EQ(v41().decode(V{}), "");
  EXPECT_EQ(v41().decode(V{}, true), "");
}

TEST(Encode, InvalidUtf8IsEncodedAsItsLossyDecoding) {
  const Tokenizer& t = v41();
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(t.encode("\xFF"), t.encode(fffd));
  EXPECT_EQ(t.encode("a\xE2\x82" "b"), t.encode("a" + fffd + "b"));
  EXPECT_EQ(t.encode_plain("<｜User｜>\xC0\xAF"), t.encode_plain("<｜User｜>" + fffd + fffd));
  EXPECT_EQ(t.encode("<｜User｜>\xED\xA0\x80"), t.encode("<｜User｜>" + fffd + fffd + fffd));
  EXPECT_EQ(t.decode(t.encode("x\xF0\x9F\x98")), "x" + fffd);
  // A truncated character right before an added token does not swallow the token.
  V before_token = t.encode(fffd);
  before_token.push_back(128821);
  EXPECT_EQ(t.encode("\xE4\xB8<think>"), before_token);
  const std::vector<SpecialRange> r = {{3, 3 + 7}};
  V expected = t.encode_plain("a" + fffd);
  expected.push_back(128821);
  EXPECT_EQ(t.encode_with_specials("a\xE4\xB8<think>", r), expected);
}

TEST(Encode, RoundTripsEveryValidText) {
  std::mt19937 rng(11);
  const Tokenizer& t = v41();
  for (int i = 0; i < 300; ++i) {
    const std::string text = testing::soup(rng, 1 + rng() % 60);
    ASSERT_EQ(t.decode(t.encode(text)), text);
    ASSERT_EQ(t.decode(t.encode_plain(text)), text);
  }
}

TEST(Encode, SegmentParallelEqualsOneThread) {
  std::mt19937 rng(5);
  const Tokenizer& t = v41();
  core::ThreadPool pool(3);
  for (int i = 0; i < 60; ++i) {
    const std::string text = testing::soup(rng, 50 + rng() % 400);
    const V one = t.encode(text);
    const V plain = t.encode_plain(text);
    for (size_t chunk : {1, 2, 7, 64, 1000}) {
      EncodeOptions o;
      o.pool = &pool;
      o.parallel_min_bytes = 0;
      o.chunk_bytes = chunk;
      ASSERT_EQ(t.encode(text, o), one) << "chunk " << chunk << " text " << text;
      ASSERT_EQ(t.encode_plain(text, o), plain) << "chunk " << chunk << " text " << text;
    }
  }
}

TEST(Encode, CutPointsAreUsedOnLongText) {
  // English, Chinese and code with no added tokens: cutting must happen (and not change the ids).
  std::string text;
  for (int i = 0; i < 2000; ++i)
    text += "The model reads the request and writes a reply.\n中文测试，这是一个句子。\nfor (int i = 0; i < n; ++i) x[i] = 2;\n";
  const Tokenizer& t = v41();
  ASSERT_TRUE(t.has_cut_points());
  core::ThreadPool pool(2);
  EncodeOptions o;
  o.pool = &pool;
  o.chunk_bytes = 4096;
  EXPECT_EQ(t.encode_plain(text, o), t.encode_plain(text));
  EXPECT_EQ(t.encode(text, o), t.encode(text));
}

TEST(Encode, BatchEqualsOneByOne) {
  std::mt19937 rng(3);
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i) texts.push_back(testing::soup(rng, rng() % 30));
  std::vector<std::string_view> views(texts.begin(), texts.end());
  core::ThreadPool pool(2);
  EncodeOptions o;
  o.pool = &pool;
  const Tokenizer& t = v41();
  const auto special = t.encode_batch(views, true, o);
  const auto plain = t.encode_batch(views, false);
  ASSERT_EQ(special.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(special[i], t.encode(texts[i]));
    EXPECT_EQ(plain[i], t.encode_plain(texts[i]));
  }
}

TEST(Decode, UnknownIdsAreSkippedAndBrokenBytesReplaced) {
  const Tokenizer& t = v41();
  EXPECT_EQ(t.decode(V{19923, -1, 999999, 129280, 3}), "Hello!");
  EXPECT_EQ(t.decode(V{28927}), "\xEF\xBF\xBD");         // half an emoji
  EXPECT_EQ(t.decode(V{28927, 225}), "😀");
  EXPECT_EQ(t.decode(V{0, 19923, 1}, true), "Hello");
  EXPECT_EQ(t.decode(V{0, 19923, 1}, false), "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>");
}

}  // namespace
}  // namespace dsinfer::tokenizer
