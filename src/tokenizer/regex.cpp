#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <memory>

#include "core/error.h"

namespace dsinfer::tokenizer {
namespace {

// Oniguruma's Unicode \s: U+0009..U+000D, U+0085 and the Zs, Zl, Zp categories.
constexpr const char* kOnigSpace =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kOnigWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr const char* kHexDigit = "0-9a-fA-F";

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Per-thread PCRE2 match state: one match-data block (only the whole match is read) and a JIT stack
// large enough for greedy repeats over multi-megabyte subjects.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;

  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    // PCRE2's default match limit (10 million backtracks) is reached by one `\s*[\r\n]+` attempt
    // over a 10 MB run of spaces; the DeepSeek patterns backtrack at most linearly, so lift it.
    pcre2_set_match_limit(context, 0xFFFFFFFFu);
    pcre2_set_heap_limit(context, 1024 * 1024);  // KiB, for the interpreter (non-JIT) fallback
    jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    if (jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? core::str_cat("PCRE2 error ", code) : std::string(reinterpret_cast<char*>(buffer), size_t(n));
}

}  // namespace

std::string translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      ++i;
      switch (e) {
        case 's':
          out += in_class ? std::string(kOnigSpace) : core::str_cat("[", kOnigSpace, "]");
          continue;
        case 'S':
          out += in_class ? std::string("\\S") : core::str_cat("[^", kOnigSpace, "]");
          continue;
        case 'w':
          out += in_class ? std::string(kOnigWord) : core::str_cat("[", kOnigWord, "]");
          continue;
        case 'W':
          out += in_class ? std::string("\\W") : core::str_cat("[^", kOnigWord, "]");
          continue;
        case 'h':
          out += in_class ? std::string(kHexDigit) : core::str_cat("[", kHexDigit, "]");
          continue;
        case 'H':
          out += in_class ? std::string("\\H") : core::str_cat("[^", kHexDigit, "]");
          continue;
        case 'u':
          if (i + 4 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]) && is_hex(p[i + 4])) {
            out += core::str_cat("\\x{", p.substr(i + 1, 4), "}");
            i += 4;
            continue;
          }
          out += "\\u";
          continue;
        default:
          out.push_back('\\');
          out.push_back(e);
          continue;
      }
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      // POSIX class [:name:] inside a bracket class.
      const size_t close = p.find(":]", i + 2);
      if (close != std::string_view::npos) {
        out.append(p.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

std::string quote_regex(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

Regex::Regex(const std::string& pattern, std::string_view where) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  DSINFER_CHECK(code_ != nullptr, where, ": cannot compile regex /", pattern, "/ at offset ", offset, ": ",
                pcre2_message(error));
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::find(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const {
  MatchState& state = match_state();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  const int rc = jit_ ? pcre2_jit_match(code_, s, subject.size(), start, 0, state.data, state.context)
                      : pcre2_match(code_, s, subject.size(), start, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  DSINFER_CHECK(rc >= 0, "pre-tokenizer regex /", pattern_, "/ failed on a ", subject.size(),
                "-byte piece at byte ", start, ": ", pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
  match_begin = ov[0];
  match_end = ov[1];
  return true;
}

bool MatchIterator::next(size_t& begin, size_t& end) {
  while (search_from_ <= subject_.size()) {
    if (!regex_.find(subject_, search_from_, begin, end)) {
      search_from_ = subject_.size() + 1;
      return false;
    }
    if (begin == end && end == last_match_end_) {
      // Step over one character (UTF-8 lead byte plus continuation bytes).
      size_t next = search_from_ + 1;
      while (next < subject_.size() && (static_cast<unsigned char>(subject_[next]) & 0xC0) == 0x80) ++next;
      search_from_ = next;
      continue;
    }
    search_from_ = end;
    last_match_end_ = end;
    return true;
  }
  return false;
}

}  // namespace dsinfer::tokenizer
