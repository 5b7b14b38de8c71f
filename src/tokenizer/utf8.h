// UTF-8 handling shared by encoding and decoding. Invalid input is never an error: every maximal
// invalid subpart of a byte sequence becomes one U+FFFD, the policy of Rust's String::from_utf8_lossy
// (and of the WHATWG decoder). A Rust `&str`, which is what Hugging Face tokenizers encodes, cannot
// hold invalid UTF-8, so "lossy-decode, then encode" is what a Rust caller would have to do too, and
// it is what decoding does with token bytes that do not form valid UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::tokenizer::utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

bool is_valid(std::string_view bytes);

// Appends `bytes` to `out` with every maximal invalid subpart replaced by U+FFFD. When `final` is
// false, a trailing sequence that is incomplete but could still become valid is not consumed: the
// return value is the number of bytes consumed (always bytes.size() when `final`).
size_t append_lossy(std::string_view bytes, std::string& out, bool final);

inline std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_lossy(bytes, out, true);
  return out;
}

void append_codepoint(char32_t cp, std::string& out);

// Decodes the code point starting at s[i] of VALID UTF-8 and returns its byte length in `len`.
inline char32_t decode(const unsigned char* s, size_t& len) {
  const unsigned char b = s[0];
  if (b < 0x80) {
    len = 1;
    return b;
  }
  if (b < 0xE0) {
    len = 2;
    return (char32_t(b & 0x1F) << 6) | (s[1] & 0x3F);
  }
  if (b < 0xF0) {
    len = 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
  }
  len = 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(s[1] & 0x3F) << 12) | (char32_t(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
}

// The code point that ends at byte offset `end` of valid UTF-8 (end > 0).
inline char32_t decode_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t len = 0;
  return decode(reinterpret_cast<const unsigned char*>(s.data()) + start, len);
}

// Rust's char::is_whitespace: the Unicode White_Space property.
inline bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace dsinfer::tokenizer::utf8
