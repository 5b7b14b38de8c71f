// UTF-8 repair follows the "maximal subpart" practice (Unicode §3.9, WHATWG, Rust's from_utf8_lossy):
// the expectations below are the standard's worked examples.
#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"

namespace dsinfer::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, ValidTextIsUnchanged) {
  for (const std::string s : {"", "abc", "中文", "😀👍🏽", "\x7F", "\xC2\x80", "\xF4\x8F\xBF\xBF", "\xEF\xBF\xBD"}) {
    EXPECT_TRUE(utf8::is_valid(s)) << s;
    EXPECT_EQ(utf8::lossy(s), s);
  }
}

TEST(Utf8, MaximalSubpartsBecomeOneReplacementEach) {
  EXPECT_EQ(utf8::lossy("\x80"), kFffd);
  EXPECT_EQ(utf8::lossy("a\xFF" "b"), "a" + kFffd + "b");
  EXPECT_EQ(utf8::lossy("\xE2\x82"), kFffd);                 // truncated 3-byte sequence: one
  EXPECT_EQ(utf8::lossy("\xE2\x82" "A"), kFffd + "A");
  EXPECT_EQ(utf8::lossy("\xF0\x9F\x98"), kFffd);             // truncated emoji
  EXPECT_EQ(utf8::lossy("\xC0\xAF"), kFffd + kFffd);         // overlong lead
  EXPECT_EQ(utf8::lossy("\xE0\x80\xAF"), kFffd + kFffd + kFffd);
  EXPECT_EQ(utf8::lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(utf8::lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_EQ(utf8::lossy("\xF8\x88\x80\x80\x80"), kFffd + kFffd + kFffd + kFffd + kFffd);
  // The Unicode standard's table 3-8 example: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64
  EXPECT_EQ(utf8::lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_FALSE(utf8::is_valid("\xE2\x82"));
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));
}

TEST(Utf8, NonFinalAppendHoldsBackOnlyAnIncompleteCharacter) {
  std::string out;
  EXPECT_EQ(utf8::append_lossy("ab\xE4\xB8", out, false), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("ab\xE4\x41", out, false), 4u);  // can never complete: replaced now
  EXPECT_EQ(out, "ab" + kFffd + "A");
  out.clear();
  EXPECT_EQ(utf8::append_lossy("\xF0\x9F\x98", out, false), 0u);
  EXPECT_EQ(out, "");
}

TEST(ByteLevel, AlphabetIsGpt2s) {
  EXPECT_EQ(byte_level::byte_to_char('a'), U'a');
  EXPECT_EQ(byte_level::byte_to_char('!'), U'!');
  EXPECT_EQ(byte_level::byte_to_char(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::byte_to_char('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::byte_to_char(0x00), U'\u0100');
  EXPECT_EQ(byte_level::byte_to_char(0x7F), U'\u0121');
  EXPECT_EQ(byte_level::byte_to_char(0xA0), U'\u0142');
  EXPECT_EQ(byte_level::byte_to_char(0xAD), U'\u0143');
  EXPECT_EQ(byte_level::byte_to_char(0xFF), U'\u00FF');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  std::string back;
  ASSERT_TRUE(byte_level::decode(byte_level::encode(all), back));
  EXPECT_EQ(back, all);
  std::string out = "x";
  EXPECT_FALSE(byte_level::decode("a｜b", out));  // ｜ is not in the alphabet
  EXPECT_EQ(out, "x");
}

}  // namespace
}  // namespace dsinfer::tokenizer
