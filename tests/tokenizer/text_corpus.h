// Deterministic test texts: a soup of the characters that matter to the DeepSeek pre-tokenizer
// (letters, digits, CJK, kana, Hangul, emoji, punctuation, every kind of whitespace, controls,
// combining marks) and of added-token spellings.
#pragma once

#include <random>
#include <string>
#include <vector>

namespace dsinfer::tokenizer::testing {

inline const std::vector<std::string>& soup_units() {
  static const std::vector<std::string> units = {
      "a", "b", "Z", "q", "hello", " world", "The", "e\xCC\x81", "ß", "Ω", "д", "ا", "ก",
      "1", "23", "456", "7890", "٣", "½", "Ⅷ",
      "中", "文", "测试", "の", "カ", "ﾅ", "한", "국", "𝕳", "😀", "👍🏽", "👨\u200d👩", "☺️",
      " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2003", "\u202f", "\u205f", "\u180e",
      "\u2028", "\u0085", "\x0b", "\x0c", "\x1c", "\x7f", "\x01", "\u200d", "\u202e", "\ufeff",
      ".", ",", "!", "?", "'", "\"", "(", ")", "{", "}", "[", "]", "<", ">", "/", "\\", "-", "_", "=", "+",
      "*", "#", "@", "$", "%", "&", "|", "~", "`", "^", ";", ":", "，", "。", "「", "」", "—", "…", "｜",
      "<｜User｜>", "<｜Assistant｜>", "<｜System｜>", "<think>", "</think>", "｜DSML｜", "<｜image｜>",
      "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜place▁holder▁no▁0｜>", "<｜table｜>",
      "<|place_holder_mm_span_0439|>", "<｜DSML｜ calls>", "<｜latest_reminder｜>", "<｜fim▁hole｜>",
  };
  return units;
}

inline std::string soup(std::mt19937& rng, size_t units) {
  const auto& u = soup_units();
  std::string out;
  for (size_t i = 0; i < units; ++i) out += u[rng() % u.size()];
  return out;
}

}  // namespace dsinfer::tokenizer::testing
