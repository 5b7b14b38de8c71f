#include "grammar/utf8_ranges.h"

#include <algorithm>
#include <string>

#include "tokenizer/utf8.h"

namespace dsinfer::grammar {

std::string utf8_encode(uint32_t cp) {
  std::string out;
  tokenizer::utf8::append_codepoint(static_cast<char32_t>(cp), out);
  return out;
}

std::vector<CodeRange> normalize_code_ranges(std::vector<CodeRange> ranges, bool negated) {
  std::vector<CodeRange> merged;
  for (CodeRange& r : ranges) r.hi = std::min(r.hi, kMaxCodePoint);
  std::sort(ranges.begin(), ranges.end(), [](const CodeRange& a, const CodeRange& b) { return a.lo < b.lo; });
  for (const CodeRange& r : ranges) {
    if (r.lo > r.hi) continue;
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<CodeRange> comp;
    uint32_t next = 0;
    for (const CodeRange& r : merged) {
      if (r.lo > next) comp.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    merged = std::move(comp);
  }
  // Cut the surrogates out.
  std::vector<CodeRange> out;
  for (const CodeRange& r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

namespace {

void split(uint32_t lo, uint32_t hi, std::vector<Utf8Sequence>& out) {
  // One encoded length per piece.
  for (uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= edge && hi > edge) {
      split(lo, edge, out);
      split(edge + 1, hi, out);
      return;
    }
  }
  // Then pieces whose continuation bytes each run over a full or a common range: a piece [lo, hi] is a
  // cross product of byte ranges when every trailing 6-bit group spans 0..3F wherever a leading one differs.
  for (int i = 1; i < 4; ++i) {
    uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a = utf8_encode(lo), b = utf8_encode(hi);
  Utf8Sequence seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.push_back({static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])});
  }
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<Utf8Sequence> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<Utf8Sequence> out;
  split(lo, hi, out);
  return out;
}

}  // namespace dsinfer::grammar
