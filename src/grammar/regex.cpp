#include "grammar/regex.h"

#include "core/error.h"
#include "grammar/text_scanner.h"
#include "grammar/utf8_ranges.h"

namespace dsinfer::grammar {

namespace {

const std::vector<CodeRange> kDigit = {{'0', '9'}};
const std::vector<CodeRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodeRange> kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0xFEFF, 0xFEFF},
                                       {0x2028, 0x2029}};

class RegexParser {
 public:
  RegexParser(std::string_view text, const ClassEmitter& emit) : s_(text, "regex"), text_(text), emit_(emit) {}

  Expr run() {
    s_.eat('^');
    Expr e = parse_alternation(0);
    if (!s_.done()) s_.fail(std::string("unexpected '") + s_.peek() + "'");
    return e;
  }

 private:
  Expr cls(std::vector<CodeRange> ranges, bool negated) {
    if (emit_) return emit_(std::move(ranges), negated);
    return char_class(std::move(ranges), negated);
  }

  Expr parse_alternation(int depth) {
    if (depth > kMaxNesting) s_.fail("nesting too deep");
    std::vector<Expr> alts;
    alts.push_back(parse_concat(depth));
    while (s_.eat('|')) alts.push_back(parse_concat(depth));
    return alt(std::move(alts));
  }

  Expr parse_concat(int depth) {
    std::vector<Expr> items;
    for (;;) {
      if (s_.done() || s_.peek() == '|' || s_.peek() == ')') break;
      if (s_.peek() == '$' && s_.pos() + 1 == text_.size()) {
        s_.next();  // the implicit end anchor
        break;
      }
      Expr atom = parse_atom(depth);
      items.push_back(parse_quantifier(std::move(atom)));
    }
    return seq(std::move(items));
  }

  // A {m,n} quantifier at the cursor, or false (a literal '{').
  bool try_braces(int32_t& lo, int32_t& hi) {
    size_t save = s_.pos();
    s_.next();
    auto number = [&](int32_t& out) {
      if (!(s_.peek() >= '0' && s_.peek() <= '9') || s_.done()) return false;
      int64_t v = 0;
      while (!s_.done() && s_.peek() >= '0' && s_.peek() <= '9') {
        v = v * 10 + (s_.next() - '0');
        if (v > kMaxRepeat) s_.fail_at(save, "repeat count above " + std::to_string(kMaxRepeat));
      }
      out = static_cast<int32_t>(v);
      return true;
    };
    if (!number(lo)) {
      s_.set_pos(save);
      return false;
    }
    hi = lo;
    if (s_.eat(',')) {
      if (!number(hi)) hi = kUnbounded;
    }
    if (!s_.eat('}')) {
      s_.set_pos(save);
      return false;
    }
    if (hi != kUnbounded && hi < lo) s_.fail_at(save, "repeat maximum below its minimum");
    return true;
  }

  Expr parse_quantifier(Expr atom) {
    for (;;) {
      char c = s_.peek();
      if (s_.done()) return atom;
      int32_t lo = 0, hi = 0;
      if (c == '*') {
        s_.next(), lo = 0, hi = kUnbounded;
      } else if (c == '+') {
        s_.next(), lo = 1, hi = kUnbounded;
      } else if (c == '?') {
        s_.next(), lo = 0, hi = 1;
      } else if (c == '{') {
        if (!try_braces(lo, hi)) return atom;
      } else {
        return atom;
      }
      if (s_.eat('?')) {
        // lazy: same language
      } else if (s_.peek() == '+' && !s_.done()) {
        s_.fail("possessive quantifiers are not supported");
      }
      atom = repeat(std::move(atom), lo, hi);
    }
  }

  // An escape that stands for a class (\d ...) or one code point; inside [] `in_class` forbids \b etc.
  // Returns true with `ranges`/`negated` for a class escape, false with `cp` for a character.
  bool parse_escape(std::vector<CodeRange>& ranges, bool& negated, uint32_t& cp) {
    size_t at = s_.pos() - 1;
    if (s_.done()) s_.fail("pattern ends inside an escape");
    char c = s_.next();
    negated = false;
    switch (c) {
      case 'd': ranges = kDigit; return true;
      case 'D': ranges = kDigit, negated = true; return true;
      case 'w': ranges = kWord; return true;
      case 'W': ranges = kWord, negated = true; return true;
      case 's': ranges = kSpace; return true;
      case 'S': ranges = kSpace, negated = true; return true;
      case 'n': cp = '\n'; return false;
      case 'r': cp = '\r'; return false;
      case 't': cp = '\t'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = s_.hex(2); return false;
      case 'u': cp = s_.peek() == '{' ? s_.hex(0) : s_.hex(4); return false;
      case 'b': case 'B': s_.fail_at(at, std::string("word boundary \\") + c + " is not supported");
      case 'k': s_.fail_at(at, "named backreference \\k is not supported");
      case 'p': case 'P': s_.fail_at(at, std::string("Unicode property escape \\") + c + " is not supported");
      default:
        if (c >= '1' && c <= '9') s_.fail_at(at, "backreference \\" + std::string(1, c) + " is not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          s_.fail_at(at, std::string("unknown escape \\") + c);
        }
        s_.set_pos(s_.pos() - 1);
        cp = s_.next_code_point();
        return false;
    }
  }

  Expr parse_atom(int depth) {
    size_t at = s_.pos();
    char c = s_.peek();
    switch (c) {
      case '(': {
        s_.next();
        if (s_.eat('?')) {
          if (s_.eat(':')) {
          } else if (s_.eat('<') || s_.eat("P<")) {
            if (s_.peek() == '=' || s_.peek() == '!') s_.fail_at(at, "lookbehind is not supported");
            while (!s_.done() && s_.peek() != '>') s_.next();
            if (!s_.eat('>')) s_.fail_at(at, "unterminated group name");
          } else if (s_.peek() == '=' || s_.peek() == '!') {
            s_.fail_at(at, "lookahead is not supported");
          } else {
            s_.fail_at(at, "unsupported group syntax '(?'");
          }
        }
        Expr inner = parse_alternation(depth + 1);
        if (!s_.eat(')')) s_.fail_at(at, "unclosed '('");
        return inner;
      }
      case ')': s_.fail("unmatched ')'");
      case '*': case '+': case '?': s_.fail(std::string("nothing to repeat before '") + c + "'");
      case '[': return parse_class();
      case '.': s_.next(); return cls({{'\n', '\n'}}, true);
      case '^': s_.fail("'^' is only supported at the start of the pattern");
      case '$': s_.fail("'$' is only supported at the end of the pattern");
      case '\\': {
        s_.next();
        std::vector<CodeRange> ranges;
        bool negated = false;
        uint32_t cp = 0;
        if (parse_escape(ranges, negated, cp)) return cls(std::move(ranges), negated);
        return cls({{cp, cp}}, false);
      }
      default: {
        uint32_t cp = s_.next_code_point();
        return cls({{cp, cp}}, false);
      }
    }
  }

  Expr parse_class() {
    size_t at = s_.pos();
    s_.next();
    bool negated = s_.eat('^');
    std::vector<CodeRange> ranges;
    for (;;) {
      if (s_.done()) s_.fail_at(at, "unterminated character class");
      if (s_.eat(']')) break;  // as in JavaScript, [] matches nothing and [^] anything
      uint32_t lo = 0;
      if (s_.eat('\\')) {
        std::vector<CodeRange> esc;
        bool esc_negated = false;
        if (parse_escape(esc, esc_negated, lo)) {
          // Negated class escapes inside a class (\D, \W, \S) add their complements.
          if (esc_negated) esc = normalize_code_ranges(std::move(esc), true);
          ranges.insert(ranges.end(), esc.begin(), esc.end());
          continue;
        }
      } else {
        lo = s_.next_code_point();
      }
      uint32_t hi = lo;
      if (s_.remaining() >= 2 && s_.peek() == '-' && s_.peek(1) != ']') {
        s_.next();
        if (s_.eat('\\')) {
          std::vector<CodeRange> esc;
          bool esc_negated = false;
          if (parse_escape(esc, esc_negated, hi)) s_.fail_at(at, "a class escape cannot end a range");
        } else {
          hi = s_.next_code_point();
        }
        if (hi < lo) s_.fail_at(at, "character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    if (ranges.empty() && !negated) s_.fail_at(at, "empty character class [] matches nothing");
    return cls(std::move(ranges), negated);
  }

  TextScanner s_;
  std::string_view text_;
  const ClassEmitter& emit_;
};

}  // namespace

Expr compile_regex(std::string_view pattern, const ClassEmitter& emit) { return RegexParser(pattern, emit).run(); }

Grammar regex_grammar(std::string_view pattern) {
  GrammarBuilder b;
  b.define("root", compile_regex(pattern));
  return b.build("root");
}

}  // namespace dsinfer::grammar
