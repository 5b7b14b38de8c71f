#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace dsinfer::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<int16_t, 0x144> to_byte{};

  Tables() {
    to_byte.fill(-1);
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? char32_t(b) : char32_t(256 + shifted++);
      to_char[b] = c;
      to_byte[c] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_char(uint8_t byte) { return tables().to_char[byte]; }

int byte_of_char(char32_t cp) { return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append_codepoint(byte_to_char(b), out);
  return out;
}

bool decode(std::string_view token, std::string& out) {
  const size_t mark = out.size();
  const auto* s = reinterpret_cast<const unsigned char*>(token.data());
  size_t i = 0;
  while (i < token.size()) {
    size_t len = 0;
    const int b = byte_of_char(utf8::decode(s + i, len));
    if (b < 0) {
      out.resize(mark);
      return false;
    }
    out.push_back(static_cast<char>(b));
    i += len;
  }
  return true;
}

}  // namespace dsinfer::tokenizer::byte_level
