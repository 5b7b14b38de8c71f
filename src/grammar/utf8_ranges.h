// Code point ranges as UTF-8 byte-range sequences, so a character class over code points becomes an
// alternation of byte sequences for the byte-level matcher.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

struct ByteRange {
  uint8_t lo, hi;
};
using Utf8Sequence = std::vector<ByteRange>;

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Sorted, merged, clamped to the Unicode scalar values (no surrogates); complemented if `negated`.
std::vector<CodeRange> normalize_code_ranges(std::vector<CodeRange> ranges, bool negated);

// The byte sequences whose UTF-8 decodings are exactly the scalar values in [lo, hi] (lo <= hi, neither a
// surrogate range's inside). Each sequence's byte ranges combine freely (a cross product of one byte each).
std::vector<Utf8Sequence> utf8_sequences(uint32_t lo, uint32_t hi);

// UTF-8 encoding of one code point.
std::string utf8_encode(uint32_t cp);

}  // namespace dsinfer::grammar
