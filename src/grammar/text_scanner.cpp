#include "grammar/text_scanner.h"

#include "core/error.h"

namespace dsinfer::grammar {

void TextScanner::fail_at(size_t at, const std::string& message) const {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at && i < text_.size(); ++i) {
    if (text_[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<uint8_t>(text_[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  core::fail(what_, " line ", line, " column ", column, ": ", message);
}

uint32_t TextScanner::next_code_point() {
  if (done()) fail("unexpected end");
  size_t start = pos_;
  uint8_t b = static_cast<uint8_t>(next());
  if (b < 0x80) return b;
  int more = b >= 0xF0 && b < 0xF5 ? 3 : b >= 0xE0 ? 2 : b >= 0xC2 && b < 0xE0 ? 1 : -1;
  if (more < 0) fail_at(start, "invalid UTF-8");
  uint32_t cp = b & (0x3F >> more);
  for (int i = 0; i < more; ++i) {
    uint8_t c = static_cast<uint8_t>(peek());
    if (done() || (c & 0xC0) != 0x80) fail_at(start, "invalid UTF-8");
    ++pos_;
    cp = (cp << 6) | (c & 0x3F);
  }
  static const uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[more] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail_at(start, "invalid UTF-8");
  return cp;
}

uint32_t TextScanner::hex(int count) {
  size_t start = pos_;
  bool braced = count == 0 && eat('{');
  uint32_t v = 0;
  int n = 0;
  while (braced ? peek() != '}' : n < count) {
    char c = peek();
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (done() || d < 0) fail_at(start, "bad hexadecimal escape");
    ++pos_;
    v = v * 16 + static_cast<uint32_t>(d);
    if (++n > 8) fail_at(start, "hexadecimal escape too long");
  }
  if (braced) {
    if (n == 0) fail_at(start, "empty \\u{} escape");
    ++pos_;
  }
  if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) fail_at(start, "escape is not a Unicode scalar value");
  return v;
}

}  // namespace dsinfer::grammar
