#include "model/deepseek_v41/engram_normalize.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include "core/error.h"

namespace dsinfer::model::deepseek_v41 {
namespace {

const icu::Normalizer2& normalizer(bool compatibility) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n =
      compatibility ? icu::Normalizer2::getNFKCInstance(status) : icu::Normalizer2::getNFDInstance(status);
  DSINFER_CHECK(U_SUCCESS(status) && n, "ICU: cannot load the ", compatibility ? "NFKC" : "NFD",
                " data: ", u_errorName(status));
  return *n;
}

bool is_mark(UChar32 c) {
  const int8_t t = u_charType(c);
  return t == U_NON_SPACING_MARK || t == U_COMBINING_SPACING_MARK || t == U_ENCLOSING_MARK;
}

// Appends the full lowercase mapping of `c` alone: a one-code-point string has no casing context,
// which is what HF's per-char lowercase sees.
void append_lower(UChar32 c, icu::UnicodeString& out) {
  UChar in[2];
  int32_t n = 0;
  U16_APPEND_UNSAFE(in, n, c);
  UChar lower[8];
  UErrorCode status = U_ZERO_ERROR;
  const int32_t len = u_strToLower(lower, 8, in, n, "", &status);
  DSINFER_CHECK(U_SUCCESS(status), "ICU: lowercasing U+", static_cast<int64_t>(c), ": ", u_errorName(status));
  out.append(lower, len);
}

}  // namespace

std::string engram_normalize(std::string_view text) {
  static const icu::Normalizer2& nfkc = normalizer(true);
  static const icu::Normalizer2& nfd = normalizer(false);
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString src = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const icu::UnicodeString decomposed = nfd.normalize(nfkc.normalize(src, status), status);
  DSINFER_CHECK(U_SUCCESS(status), "ICU normalisation failed: ", u_errorName(status));

  // StripAccents, Lowercase, then "[ \t\r\n]+" -> " " in the same pass (the regex sees lowercased text;
  // lowercasing never makes or removes these four characters).
  icu::UnicodeString folded;
  bool in_space_run = false;
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 c = decomposed.char32At(i);
    i += U16_LENGTH(c);
    if (is_mark(c)) continue;
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      if (!in_space_run) folded.append(static_cast<UChar>(' '));
      in_space_run = true;
      continue;
    }
    in_space_run = false;
    append_lower(c, folded);
  }
  // "^ $" -> U+E000 keeps a lone space through Strip; every U+E000 (also one the text had) becomes a
  // space after it.
  if (folded.length() == 1 && folded[0] == ' ') folded.setCharAt(0, static_cast<UChar>(0xE000));
  // Strip: White_Space on both ends (Rust's char::is_whitespace).
  int32_t begin = 0;
  int32_t end = folded.length();
  while (begin < end && u_isUWhiteSpace(folded.char32At(begin))) begin += U16_LENGTH(folded.char32At(begin));
  while (end > begin) {
    const int32_t last = folded.moveIndex32(end, -1);
    if (!u_isUWhiteSpace(folded.char32At(last))) break;
    end = last;
  }
  icu::UnicodeString stripped = folded.tempSubStringBetween(begin, end);
  stripped.findAndReplace(icu::UnicodeString(static_cast<UChar>(0xE000)), icu::UnicodeString(static_cast<UChar>(' ')));
  std::string out;
  stripped.toUTF8String(out);
  return out;
}

}  // namespace dsinfer::model::deepseek_v41
