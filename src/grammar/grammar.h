// The grammar IR: expressions (bytes, sequences, alternations, repeats, rule references) that every
// front end (GBNF/EBNF, regex, JSON Schema) builds, and their lowering to a byte-level BNF `Grammar`
// (nonterminals with productions over terminal byte sets) that the Earley matcher runs.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsinfer::grammar {

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  void add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  void merge(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) words[i] |= o.words[i];
  }
  bool operator==(const ByteSet&) const = default;
  auto operator<=>(const ByteSet&) const = default;
};

// An expression of the IR. Value type; front ends compose it with the helpers below.
struct Expr {
  enum class Kind : uint8_t { kEmpty, kBytes, kSeq, kAlt, kRepeat, kRef };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;             // kBytes: one byte out of the set
  std::vector<Expr> items;   // kSeq, kAlt; kRepeat: items[0]
  int32_t min = 0, max = 0;  // kRepeat: max -1 = unbounded
  std::string name;          // kRef
};

inline constexpr int32_t kUnbounded = -1;

Expr empty();
Expr bytes(const ByteSet& set);
Expr byte(uint8_t b);
Expr literal(std::string_view text);  // the exact bytes
Expr seq(std::vector<Expr> items);
Expr alt(std::vector<Expr> items);
Expr repeat(Expr item, int32_t min, int32_t max);
Expr ref(std::string name);
inline Expr opt(Expr e) { return repeat(std::move(e), 0, 1); }
inline Expr star(Expr e) { return repeat(std::move(e), 0, kUnbounded); }
inline Expr plus(Expr e) { return repeat(std::move(e), 1, kUnbounded); }

// A code point range [lo, hi], inclusive.
struct CodeRange {
  uint32_t lo, hi;
};
// One character (UTF-8 encoded) whose code point is in the ranges, or (negated) in none of them.
// Surrogates (U+D800..U+DFFF) are never produced, so the bytes matched are always valid UTF-8.
Expr char_class(std::vector<CodeRange> ranges, bool negated = false);
// Any character but the ones given (ASCII and others).
inline Expr any_char() { return char_class({}, true); }

// A symbol of a production: a nonterminal id (>= 0) or a terminal, -1 - (index into terminals).
using Symbol = int32_t;
inline bool is_terminal(Symbol s) { return s < 0; }
inline int32_t terminal_index(Symbol s) { return -1 - s; }

class MaskCache;  // mask_cache.h

// Byte-level BNF: what the matcher runs.
struct Grammar {
  struct Production {
    int32_t lhs;
    std::vector<Symbol> rhs;
  };
  std::vector<std::string> names;               // per nonterminal
  std::vector<Production> productions;
  std::vector<std::vector<int32_t>> by_lhs;     // per nonterminal: its productions
  std::vector<ByteSet> terminals;
  std::vector<char> nullable;                   // per nonterminal
  int32_t start = 0;
  // Token masks per Earley item, shared by every matcher of this grammar (GrammarBuilder::build makes
  // it; null: every mask is walked in full). Copies share it, so a copy must not change the rules.
  std::shared_ptr<MaskCache> mask_cache;
};

// Collects named rules and lowers them. Throws core::Error for a reference to an undefined rule, a rule
// defined twice, or a rule that can never finish (recursion without a way out).
class GrammarBuilder {
 public:
  void define(const std::string& name, Expr expr);
  bool defined(const std::string& name) const { return rules_.count(name) != 0; }
  Grammar build(const std::string& start) const;

 private:
  std::map<std::string, Expr> rules_;
  std::vector<std::string> order_;
};

// A readable dump of a lowered grammar (tests, debugging).
std::string to_string(const Grammar& g);

}  // namespace dsinfer::grammar
