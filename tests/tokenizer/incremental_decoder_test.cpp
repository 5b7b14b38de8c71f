#include "tokenizer/incremental_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "text_corpus.h"
#include "tokenizer/utf8.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

using V = std::vector<int32_t>;

TEST(IncrementalDecoder, HoldsBackSplitCharacters) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  IncrementalDecoder d(t);
  EXPECT_EQ(d.step(19923), "Hello");
  EXPECT_EQ(d.step(28927), "");  // F0 9F 98: the first three bytes of 😀
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.step(225), "😀");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.step(28927), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");  // the stream ended inside a character
  EXPECT_EQ(d.flush(), "");
  EXPECT_EQ(d.step(28927), "");
  EXPECT_EQ(d.step(19923), "\xEF\xBF\xBDHello");  // can never complete: replaced, then the text
}

TEST(IncrementalDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  IncrementalDecoder keep(t, false), skip(t, true);
  const V ids = {0, 19923, 128803, 1};
  EXPECT_EQ(keep.step(ids) + keep.flush(), t.decode(ids, false));
  EXPECT_EQ(skip.step(ids) + skip.flush(), "Hello<｜User｜>");
}

TEST(IncrementalDecoder, StreamEqualsWholeDecodeAndIsAlwaysValid) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  std::mt19937 rng(17);
  for (int round = 0; round < 300; ++round) {
    V ids;
    if (round % 2 == 0) {
      ids = t.encode(testing::soup(rng, 1 + rng() % 40));
    } else {
      // Random ids, including unknown ones and many partial-UTF-8 byte tokens.
      const size_t n = rng() % 30;
      for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % 3 == 0 ? rng() % 260 : rng() % 129400));
    }
    const bool skip = rng() % 2;
    IncrementalDecoder d(t, skip);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = d.step(id);
      ASSERT_TRUE(utf8::is_valid(piece));
      streamed += piece;
    }
    streamed += d.flush();
    ASSERT_EQ(streamed, t.decode(ids, skip)) << "round " << round;
  }
}

}  // namespace
}  // namespace dsinfer::tokenizer
