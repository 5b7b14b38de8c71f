#include <gtest/gtest.h>

#include "core/error.h"
#include "synthetic_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_files.h"

namespace dsinfer::tokenizer {
namespace {

using V = std::vector<int32_t>;
using testing::added;

Tokenizer with_added(nlohmann::json tokens) {
  testing::SyntheticSpec spec;
  spec.added_tokens = std::move(tokens);
  return Tokenizer::from_json_text(testing::synthetic_tokenizer_json(spec), "synthetic");
}

TEST(AddedTokens, LeftmostLongest) {
  const Tokenizer t = with_added({added(300, "<a>", false, true), added(301, "<ab>", false, true),
                                  added(302, "b>x", false, true)});
  EXPECT_EQ(t.encode("x<ab>y"), (V{'x', 301, 'y'}));
  EXPECT_EQ(t.encode("<a><ab>"), (V{300, 301}));
  // "<ab>x": the longest token at the leftmost start wins even though "b>x" would also match.
  EXPECT_EQ(t.encode("<ab>x"), (V{301, 'x'}));
  EXPECT_EQ(t.encode("<b>x"), (V{'<', 302}));
}

TEST(AddedTokens, NonNormalizedTokensAreFoundFirst) {
  // Pass 1 finds the normalized=false token "bc"; the longer normalized token "abcd" is then no
  // longer in one piece, as in Hugging Face's AddedVocabulary::extract_and_normalize.
  const Tokenizer t = with_added({added(300, "bc", true, false), added(301, "abcd", false, true)});
  EXPECT_EQ(t.encode("abcd"), (V{'a', 300, 'd'}));
  EXPECT_EQ(t.encode("abcdx"), (V{'a', 300, 'd', 'x'}));
  EXPECT_EQ(t.encode("abxcd"), (V{'a', 'b', 'x', 'c', 'd'}));
}

TEST(AddedTokens, StripAndSingleWordFlags) {
  const Tokenizer t = with_added({added(300, "<m>", true, false, /*lstrip=*/true, /*rstrip=*/true),
                                  added(301, "ab", false, true, false, false, /*single_word=*/true)});
  EXPECT_EQ(t.encode("a  <m>  b"), (V{'a', 300, 'b'}));
  EXPECT_EQ(t.decode(t.encode("a  <m>  b")), "a<m>b");
  EXPECT_EQ(t.encode("ab cd"), (V{301, ' ', 'c', 'd'}));
  EXPECT_EQ(t.encode("xab"), (V{'x', 'a', 'b'}));     // not at a word start
  EXPECT_EQ(t.encode("ab_"), (V{'a', 'b', '_'}));     // '_' is a word character
  EXPECT_EQ(t.encode("(ab)"), (V{'(', 301, ')'}));
}

TEST(AddedTokens, PlainEncodingIgnoresAddedTokens) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  // recipe.md §7: <｜User｜> as plain BPE; §6 / issue #5: the role tokens add 5 tokens, <think> 3.
  EXPECT_EQ(t.encode_plain("<｜User｜>"), (V{30, 28217, 6756, 28217, 32}));
  EXPECT_EQ(t.encode_plain("<｜Assistant｜>").size(), 5u);
  EXPECT_EQ(t.encode_plain("<｜System｜>").size(), 5u);
  EXPECT_EQ(t.encode_plain("<think>").size(), 3u);
  EXPECT_EQ(t.encode_plain("</think>").size(), 3u);
  EXPECT_EQ(t.encode("<｜User｜>"), (V{128803}));
  for (const int32_t id : t.encode_plain("<｜begin▁of▁sentence｜><｜User｜>｜DSML｜<｜image｜>x<think>")) {
    EXPECT_LT(id, 128000) << "plain encoding produced added token " << id;
  }
  EXPECT_EQ(t.decode(t.encode_plain("<｜User｜>hi</think>")), "<｜User｜>hi</think>");
}

TEST(AddedTokens, EncodeWithSpecialRanges) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  const std::string text = "<｜User｜>hi <｜User｜><｜Assistant｜>";
  const size_t user = std::string("<｜User｜>").size();
  // Only the first and last spellings are declared special; the middle one is user text.
  const std::vector<SpecialRange> ranges = {{0, user}, {user + 3 + user, text.size()}};
  V expected = {128803};
  const V hi = t.encode_plain("hi <｜User｜>");
  expected.insert(expected.end(), hi.begin(), hi.end());
  expected.push_back(128804);
  EXPECT_EQ(t.encode_with_specials(text, ranges), expected);
  EXPECT_EQ(t.encode_with_specials("", {}), V{});
  EXPECT_EQ(t.encode_with_specials("<think>", std::vector<SpecialRange>{{0, 7}}), V{128821});

  // Bad ranges are named in the error.
  auto message = [&](std::vector<SpecialRange> r) {
    try {
      t.encode_with_specials(text, r);
    } catch (const core::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{1, user}}).find("not an added token"), std::string::npos);
  EXPECT_NE(message({{0, user}, {2, user + 1}}).find("special range 1"), std::string::npos);
  EXPECT_NE(message({{0, text.size() + 1}}).find("past the end"), std::string::npos);
  EXPECT_NE(message({{3, 3}}).find("empty"), std::string::npos);
}

TEST(AddedTokens, LookupsAndFlags) {
  const Tokenizer& t = testing::deepseek(DeepseekVersion::kV41);
  EXPECT_EQ(t.vocab_size(), 129280);
  EXPECT_EQ(t.token_to_id("Hello"), 19923);
  EXPECT_EQ(t.token_to_id("ĠHello"), 45948);
  EXPECT_EQ(t.token_to_id("<｜User｜>"), 128803);
  EXPECT_EQ(t.token_to_id("no such token at all"), std::nullopt);
  EXPECT_EQ(t.id_to_token(19923), "Hello");
  EXPECT_EQ(t.id_to_token(45948), "ĠHello");
  EXPECT_EQ(t.id_to_token(128825), "｜DSML｜");
  EXPECT_EQ(t.id_to_token(-1), std::nullopt);
  EXPECT_EQ(t.id_to_token(129280), std::nullopt);
  EXPECT_EQ(t.token_bytes(45948), " Hello");
  EXPECT_EQ(t.token_bytes(28927), "\xF0\x9F\x98");  // first three bytes of 😀
  EXPECT_EQ(t.added_token_id("<think>"), 128821);
  EXPECT_EQ(t.added_token_id("Hello"), std::nullopt);
  EXPECT_TRUE(t.is_special(0));
  EXPECT_TRUE(t.is_special(129264));
  EXPECT_FALSE(t.is_special(128803));
  EXPECT_FALSE(t.is_special(19923));
  EXPECT_FALSE(t.is_special(-5));
}

}  // namespace
}  // namespace dsinfer::tokenizer
