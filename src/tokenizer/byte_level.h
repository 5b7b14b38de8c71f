// The ByteLevel alphabet of GPT-2 style tokenizers: every byte is shown as one printable code point
// (printable Latin-1 bytes as themselves, the others shifted to U+0100..U+0143), so a vocabulary of
// strings can hold arbitrary bytes. Vocabulary entries are spelled in this alphabet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::tokenizer::byte_level {

char32_t byte_to_char(uint8_t byte);

// The byte a code point of the alphabet stands for, or -1 if it is not in the alphabet.
int byte_of_char(char32_t cp);

// `bytes` spelled in the alphabet (UTF-8).
std::string encode(std::string_view bytes);

// The bytes a token spelled in the alphabet stands for. Returns false (and leaves `out` as it was)
// if the token has a character outside the alphabet; the ByteLevel decoder then keeps the token's
// own UTF-8 bytes, as Hugging Face's does. `token` must be valid UTF-8.
bool decode(std::string_view token, std::string& out);

}  // namespace dsinfer::tokenizer::byte_level
