#include "tokenizer/utf8.h"

#include <cstring>

namespace dsinfer::tokenizer::utf8 {
namespace {

// Length of the sequence a lead byte starts and the range its second byte must be in; 0 for a byte
// that cannot start a sequence (continuation bytes, C0/C1 overlong leads, F5..FF).
struct Lead {
  uint8_t extra;
  uint8_t lo;
  uint8_t hi;
};

inline Lead lead_of(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};  // no overlong 3-byte forms
  if (b == 0xED) return {2, 0x80, 0x9F};  // no surrogates
  if (b >= 0xE1 && b <= 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};  // no overlong 4-byte forms
  if (b == 0xF4) return {3, 0x80, 0x8F};  // nothing above U+10FFFF
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  return {0, 0, 0};
}

// Result of looking at the sequence that starts at s[i]: `length` valid bytes (a whole character),
// or an invalid maximal subpart of `length` bytes, or (when `truncated`) a valid prefix that the
// input ends inside of.
struct Step {
  size_t length;
  bool valid;
  bool truncated;
};

inline Step step_at(const unsigned char* s, size_t n, size_t i) {
  const Lead lead = lead_of(s[i]);
  if (lead.extra == 0) return {1, false, false};
  for (size_t k = 1; k <= lead.extra; ++k) {
    if (i + k >= n) return {k, false, true};
    const unsigned char c = s[i + k];
    const unsigned char lo = k == 1 ? lead.lo : 0x80;
    const unsigned char hi = k == 1 ? lead.hi : 0xBF;
    if (c < lo || c > hi) return {k, false, false};
  }
  return {size_t(lead.extra) + 1, true, false};
}

}  // namespace

bool is_valid(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const Step st = step_at(s, n, i);
    if (!st.valid) return false;
    i += st.length;
  }
  return true;
}

size_t append_lossy(std::string_view bytes, std::string& out, bool final) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && s[run] < 0x80) ++run;
    if (run > i) {
      out.append(bytes.data() + i, run - i);
      i = run;
      if (i >= n) break;
    }
    const Step st = step_at(s, n, i);
    if (st.valid) {
      out.append(bytes.data() + i, st.length);
    } else if (st.truncated && !final) {
      return i;  // may still complete
    } else {
      append_codepoint(kReplacement, out);
    }
    i += st.length;
  }
  return n;
}

void append_codepoint(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace dsinfer::tokenizer::utf8
