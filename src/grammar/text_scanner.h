// A cursor over grammar source text (GBNF/EBNF, regex) that knows its line and column for errors and
// reads UTF-8 characters and the escapes both syntaxes share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsinfer::grammar {

// Bounds shared by the EBNF and regex parsers, so a hostile grammar can ask for neither unbounded
// repeat counts nor unbounded parser recursion (nesting is parsed recursively).
constexpr int32_t kMaxRepeat = 10000;
constexpr int kMaxNesting = 200;

class TextScanner {
 public:
  TextScanner(std::string_view text, std::string what) : text_(text), what_(std::move(what)) {}

  bool done() const { return pos_ >= text_.size(); }
  size_t remaining() const { return done() ? 0 : text_.size() - pos_; }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  char next() { return text_[pos_++]; }
  bool eat(char c) {
    if (peek() != c || done()) return false;
    ++pos_;
    return true;
  }
  bool eat(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  size_t pos() const { return pos_; }
  void set_pos(size_t p) { pos_ = p; }

  // One UTF-8 encoded character as a code point; fails on invalid UTF-8.
  uint32_t next_code_point();
  // `count` hex digits (0 for a braced \u{...} run).
  uint32_t hex(int count);
  // Throws core::Error "<what> line L column C: message" at the current position (or `at`).
  [[noreturn]] void fail(const std::string& message) const { fail_at(pos_, message); }
  [[noreturn]] void fail_at(size_t at, const std::string& message) const;

 private:
  std::string_view text_;
  std::string what_;
  size_t pos_ = 0;
};

}  // namespace dsinfer::grammar
