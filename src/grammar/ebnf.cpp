#include "grammar/ebnf.h"

#include "core/error.h"
#include "grammar/text_scanner.h"
#include "grammar/utf8_ranges.h"

namespace dsinfer::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class EbnfParser {
 public:
  EbnfParser(std::string_view text, GrammarBuilder& builder) : s_(text, "ebnf"), builder_(builder) {}

  void run() {
    skip_space();
    if (s_.done()) s_.fail("the grammar has no rules");
    while (!s_.done()) {
      size_t at = s_.pos();
      std::string name = parse_name();
      if (name.empty()) s_.fail("expected a rule name");
      skip_space();
      if (!s_.eat("::=")) s_.fail("expected '::=' after rule name '" + name + "'");
      if (builder_.defined(name)) s_.fail_at(at, "rule '" + name + "' is defined twice");
      Expr e = parse_alternatives(0);
      builder_.define(name, std::move(e));
      skip_space();
    }
  }

 private:
  void skip_space() {
    for (;;) {
      char c = s_.peek();
      if (s_.done()) return;
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        s_.next();
      } else if (c == '#') {
        while (!s_.done() && s_.peek() != '\n') s_.next();
      } else {
        return;
      }
    }
  }

  std::string parse_name() {
    std::string name;
    while (!s_.done() && is_name_char(s_.peek())) name += s_.next();
    return name;
  }

  // At a name followed by "::=": the next rule starts here.
  bool at_rule_start() {
    size_t save = s_.pos();
    std::string name = parse_name();
    skip_space();
    bool yes = !name.empty() && s_.eat("::=");
    s_.set_pos(save);
    return yes;
  }

  Expr parse_alternatives(int depth) {
    if (depth > kMaxNesting) s_.fail("nesting too deep");
    std::vector<Expr> alts;
    alts.push_back(parse_sequence(depth));
    for (;;) {
      skip_space();
      if (!s_.eat('|')) break;
      alts.push_back(parse_sequence(depth));
    }
    return alt(std::move(alts));
  }

  Expr parse_sequence(int depth) {
    std::vector<Expr> items;
    for (;;) {
      skip_space();
      char c = s_.peek();
      if (s_.done() || c == '|' || c == ')') break;
      if (is_name_char(c) && at_rule_start()) break;
      Expr item = parse_item(depth);
      items.push_back(parse_postfix(std::move(item)));
    }
    return seq(std::move(items));
  }

  Expr parse_postfix(Expr item) {
    for (;;) {
      char c = s_.peek();
      if (s_.done()) return item;
      if (c == '*') {
        s_.next();
        item = star(std::move(item));
      } else if (c == '+') {
        s_.next();
        item = plus(std::move(item));
      } else if (c == '?') {
        s_.next();
        item = opt(std::move(item));
      } else if (c == '{') {
        size_t at = s_.pos();
        s_.next();
        int32_t lo = parse_count(), hi = lo;
        if (s_.eat(',')) hi = s_.peek() == '}' ? kUnbounded : parse_count();
        if (!s_.eat('}')) s_.fail("expected '}' to close the repeat");
        if (hi != kUnbounded && hi < lo) s_.fail_at(at, "repeat maximum below its minimum");
        item = repeat(std::move(item), lo, hi);
      } else {
        return item;
      }
    }
  }

  int32_t parse_count() {
    skip_space();
    if (!(s_.peek() >= '0' && s_.peek() <= '9')) s_.fail("expected a number in the repeat");
    int64_t v = 0;
    while (s_.peek() >= '0' && s_.peek() <= '9' && !s_.done()) {
      v = v * 10 + (s_.next() - '0');
      if (v > kMaxRepeat) s_.fail("repeat count above " + std::to_string(kMaxRepeat));
    }
    skip_space();
    return static_cast<int32_t>(v);
  }

  uint32_t parse_escape() {
    size_t at = s_.pos();
    if (s_.done()) s_.fail("unfinished escape");
    char c = s_.next();
    switch (c) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return s_.hex(2);
      case 'u': return s_.peek() == '{' ? s_.hex(0) : s_.hex(4);
      case 'U': return s_.hex(8);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': return static_cast<uint8_t>(c);
      default: s_.fail_at(at - 1, std::string("unknown escape \\") + c);
    }
  }

  Expr parse_item(int depth) {
    size_t at = s_.pos();
    char c = s_.peek();
    if (c == '"') {
      s_.next();
      std::string bytes_text;
      for (;;) {
        if (s_.done()) s_.fail_at(at, "unterminated string literal");
        if (s_.eat('"')) break;
        uint32_t cp = s_.eat('\\') ? parse_escape() : s_.next_code_point();
        bytes_text += utf8_encode(cp);
      }
      return literal(bytes_text);
    }
    if (c == '[') {
      s_.next();
      bool negated = s_.eat('^');
      std::vector<CodeRange> ranges;
      for (;;) {
        if (s_.done()) s_.fail_at(at, "unterminated character class");
        if (s_.eat(']')) break;
        uint32_t lo = s_.eat('\\') ? parse_escape() : s_.next_code_point();
        uint32_t hi = lo;
        if (s_.remaining() >= 2 && s_.peek() == '-' && s_.peek(1) != ']') {
          s_.next();
          hi = s_.eat('\\') ? parse_escape() : s_.next_code_point();
          if (hi < lo) s_.fail_at(at, "character range out of order");
        }
        ranges.push_back({lo, hi});
      }
      if (ranges.empty() && !negated) s_.fail_at(at, "empty character class");
      try {
        return char_class(std::move(ranges), negated);
      } catch (const core::Error& e) {
        s_.fail_at(at, e.what());
      }
    }
    if (c == '(') {
      s_.next();
      Expr inner = parse_alternatives(depth + 1);
      skip_space();
      if (!s_.eat(')')) s_.fail_at(at, "unclosed '('");
      return inner;
    }
    if (c == '.') {
      s_.next();
      return any_char();
    }
    if (is_name_char(c)) return ref(parse_name());
    s_.fail(std::string("unexpected '") + c + "'");
  }

  TextScanner s_;
  GrammarBuilder& builder_;
};

}  // namespace

void parse_ebnf(std::string_view text, GrammarBuilder& builder) { EbnfParser(text, builder).run(); }

Grammar compile_ebnf(std::string_view text, const std::string& start) {
  GrammarBuilder b;
  parse_ebnf(text, b);
  try {
    return b.build(start);
  } catch (const core::Error& e) {
    core::fail("ebnf: ", e.what());
  }
}

}  // namespace dsinfer::grammar
