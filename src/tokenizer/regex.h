// The regular expressions of tokenizer.json pre-tokenizers, run with PCRE2 (JIT, UTF + UCP).
// Hugging Face tokenizers runs them with Oniguruma; translate_oniguruma() rewrites the few escapes
// whose meaning differs between the two engines so that PCRE2 matches what Oniguruma matches.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace dsinfer::tokenizer {

// Oniguruma -> PCRE2: `\s`/`\S` become Oniguruma's Unicode whitespace class (PCRE2's \s also
// matches U+180E), `\w`/`\W` Oniguruma's word class (Letter, Mark, Decimal_Number,
// Connector_Punctuation), `\h`/`\H` hex digits, `\uHHHH` a code point. Inside a bracket class the
// negated forms `\S`/`\W` cannot be inlined and keep PCRE2's meaning.
std::string translate_oniguruma(std::string_view pattern);

// A regex literal matching `text` exactly (for Split patterns given as {"String": ...}).
std::string quote_regex(std::string_view text);

class Regex {
 public:
  // Compiles `pattern` (already in PCRE2 syntax); throws core::Error naming `where` and the position.
  Regex(const std::string& pattern, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Finds the leftmost match in subject[start, size) with the subject's end as the end of input.
  // The subject must be valid UTF-8 and `start` a character boundary. Throws core::Error if PCRE2
  // gives up (match or JIT stack limit).
  bool find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

// Iterates the matches of a regex over a subject with the semantics of the Rust `onig` crate's
// find_iter (what Hugging Face uses): matches do not overlap, and an empty match right where the
// previous match ended is skipped by moving on one character.
class MatchIterator {
 public:
  MatchIterator(const Regex& regex, std::string_view subject) : regex_(regex), subject_(subject) {}
  bool next(size_t& begin, size_t& end);

 private:
  const Regex& regex_;
  std::string_view subject_;
  size_t search_from_ = 0;
  size_t last_match_end_ = static_cast<size_t>(-1);
};

}  // namespace dsinfer::tokenizer
