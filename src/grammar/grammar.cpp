#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "grammar/mask_cache.h"
#include "grammar/utf8_ranges.h"

namespace dsinfer::grammar {

Expr empty() { return Expr{}; }

Expr bytes(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = set;
  return e;
}

Expr byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return bytes(s);
}

Expr literal(std::string_view text) {
  std::vector<Expr> items;
  items.reserve(text.size());
  for (char c : text) items.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(items));
}

Expr seq(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = items.empty() ? Expr::Kind::kEmpty : Expr::Kind::kSeq;
  e.items = std::move(items);
  return e;
}

Expr alt(std::vector<Expr> items) {
  if (items.size() == 1) return std::move(items[0]);
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.items = std::move(items);
  return e;
}

Expr repeat(Expr item, int32_t min, int32_t max) {
  DSINFER_CHECK(min >= 0 && (max == kUnbounded || max >= min), "bad repeat bounds {", min, ",", max, "}");
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.items.push_back(std::move(item));
  e.min = min;
  e.max = max;
  return e;
}

Expr ref(std::string name) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.name = std::move(name);
  return e;
}

Expr char_class(std::vector<CodeRange> ranges, bool negated) {
  std::vector<CodeRange> set = normalize_code_ranges(std::move(ranges), negated);
  DSINFER_CHECK(!set.empty(), "empty character class (it can match nothing)");
  ByteSet single;  // every one-byte sequence folds into one terminal
  std::vector<Expr> alts;
  for (const CodeRange& r : set) {
    for (const Utf8Sequence& s : utf8_sequences(r.lo, r.hi)) {
      if (s.size() == 1) {
        single.add_range(s[0].lo, s[0].hi);
        continue;
      }
      std::vector<Expr> items;
      for (const ByteRange& b : s) {
        ByteSet bs;
        bs.add_range(b.lo, b.hi);
        items.push_back(bytes(bs));
      }
      alts.push_back(seq(std::move(items)));
    }
  }
  if (!single.empty()) alts.insert(alts.begin(), bytes(single));
  return alt(std::move(alts));
}

void GrammarBuilder::define(const std::string& name, Expr expr) {
  DSINFER_CHECK(!name.empty(), "a rule needs a name");
  DSINFER_CHECK(rules_.count(name) == 0, "rule '", name, "' is defined twice");
  rules_.emplace(name, std::move(expr));
  order_.push_back(name);
}

namespace {

// Production indexes and dot positions are packed into the matcher's item keys (earley_matcher.cpp).
constexpr size_t kMaxProductions = size_t{1} << 20;
constexpr size_t kMaxRhs = size_t{1} << 16;

class Lowerer {
 public:
  explicit Lowerer(const std::map<std::string, Expr>& rules) : rules_(rules) {}

  Grammar run(const std::vector<std::string>& order, const std::string& start) {
    DSINFER_CHECK(rules_.count(start) != 0, "the grammar has no start rule '", start, "'");
    for (const std::string& name : order) nonterminal(name);
    for (const std::string& name : order) {
      current_ = name;
      lower_rule(nonterminal(name), rules_.at(name));
    }
    g_.start = nonterminal(start);
    for (const auto& [name, from] : referenced_) {
      DSINFER_CHECK(rules_.count(name) != 0, "rule '", from, "' refers to undefined rule '", name, "'");
    }
    DSINFER_CHECK(g_.productions.size() < kMaxProductions, "grammar too large (", g_.productions.size(),
                  " productions)");
    finish();
    return std::move(g_);
  }

 private:
  int32_t nonterminal(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    int32_t id = static_cast<int32_t>(g_.names.size());
    g_.names.push_back(name);
    origin_.push_back(name);
    ids_.emplace(name, id);
    return id;
  }
  int32_t fresh() {
    int32_t id = static_cast<int32_t>(g_.names.size());
    g_.names.push_back(current_ + "~" + std::to_string(++fresh_count_));
    origin_.push_back(current_);
    return id;
  }
  Symbol terminal(const ByteSet& set) {
    auto it = terminal_ids_.find(set);
    if (it != terminal_ids_.end()) return it->second;
    Symbol s = -1 - static_cast<int32_t>(g_.terminals.size());
    g_.terminals.push_back(set);
    terminal_ids_.emplace(set, s);
    return s;
  }
  void add(int32_t lhs, std::vector<Symbol> rhs) {
    DSINFER_CHECK(rhs.size() < kMaxRhs, "rule '", current_, "' has a sequence of ", rhs.size(),
                  " symbols (limit ", kMaxRhs, ")");
    g_.productions.push_back({lhs, std::move(rhs)});
  }

  void lower_rule(int32_t id, const Expr& e) {
    if (e.kind == Expr::Kind::kAlt) {
      for (const Expr& a : e.items) {
        std::vector<Symbol> rhs;
        lower_into(a, rhs);
        add(id, std::move(rhs));
      }
      return;
    }
    std::vector<Symbol> rhs;
    lower_into(e, rhs);
    add(id, std::move(rhs));
  }

  // One symbol standing for e.
  Symbol as_symbol(const Expr& e) {
    std::vector<Symbol> rhs;
    if (e.kind == Expr::Kind::kAlt) {
      int32_t n = fresh();
      lower_rule(n, e);
      return n;
    }
    lower_into(e, rhs);
    if (rhs.size() == 1) return rhs[0];
    int32_t n = fresh();
    add(n, std::move(rhs));
    return n;
  }

  void lower_into(const Expr& e, std::vector<Symbol>& out) {
    switch (e.kind) {
      case Expr::Kind::kEmpty: return;
      case Expr::Kind::kBytes:
        DSINFER_CHECK(!e.bytes.empty(), "rule '", current_, "' has an empty byte set (it can match nothing)");
        out.push_back(terminal(e.bytes));
        return;
      case Expr::Kind::kSeq:
        for (const Expr& item : e.items) lower_into(item, out);
        return;
      case Expr::Kind::kRef:
        referenced_.emplace(e.name, current_);
        out.push_back(nonterminal(e.name));
        return;
      case Expr::Kind::kAlt: out.push_back(as_symbol(e)); return;
      case Expr::Kind::kRepeat: {
        if (e.max == 0) return;
        Symbol x = as_symbol(e.items[0]);
        for (int32_t i = 0; i < e.min; ++i) out.push_back(x);
        if (e.max == kUnbounded) {
          // Left recursion: S -> S x | e keeps the Earley sets flat however long the repeat runs.
          int32_t s = fresh();
          add(s, {});
          add(s, {s, x});
          out.push_back(s);
        } else if (e.max > e.min) {
          // x{0,k}: O_k -> e | x O_(k-1), bounded by k.
          int32_t prev = -1;
          for (int32_t k = 1; k <= e.max - e.min; ++k) {
            int32_t o = fresh();
            add(o, {});
            if (prev < 0) {
              add(o, {x});
            } else {
              add(o, {x, prev});
            }
            prev = o;
          }
          out.push_back(prev);
        }
        return;
      }
    }
  }

  void finish() {
    size_t n = g_.names.size();
    g_.by_lhs.assign(n, {});
    for (size_t p = 0; p < g_.productions.size(); ++p) g_.by_lhs[g_.productions[p].lhs].push_back(static_cast<int32_t>(p));
    // Nullable and productive: least fixpoints over the productions.
    g_.nullable.assign(n, 0);
    std::vector<char> productive(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& prod : g_.productions) {
        bool all_null = true, all_prod = true;
        for (Symbol s : prod.rhs) {
          if (is_terminal(s)) {
            all_null = false;
          } else {
            all_null = all_null && g_.nullable[s];
            all_prod = all_prod && productive[s];
          }
        }
        if (all_null && !g_.nullable[prod.lhs]) g_.nullable[prod.lhs] = 1, changed = true;
        if (all_prod && !productive[prod.lhs]) productive[prod.lhs] = 1, changed = true;
      }
    }
    // A reachable rule that can never finish would let the matcher walk into a dead end. The error names
    // the first such rule (in reach order) that recurses into itself: the root of the trouble, not the
    // rules that merely lead to it.
    std::vector<char> reached(n, 0);
    std::vector<int32_t> order{g_.start};
    reached[g_.start] = 1;
    for (size_t k = 0; k < order.size(); ++k) {
      for (int32_t p : g_.by_lhs[order[k]]) {
        for (Symbol s : g_.productions[p].rhs) {
          if (!is_terminal(s) && !reached[s]) reached[s] = 1, order.push_back(s);
        }
      }
    }
    int32_t culprit = -1;
    for (int32_t a : order) {
      if (productive[a]) continue;
      if (culprit < 0) culprit = a;
      std::vector<char> seen(n, 0);
      std::vector<int32_t> todo{a};
      bool cycle = false;
      while (!todo.empty() && !cycle) {
        int32_t x = todo.back();
        todo.pop_back();
        for (int32_t p : g_.by_lhs[x]) {
          for (Symbol s : g_.productions[p].rhs) {
            if (is_terminal(s) || productive[s]) continue;
            if (s == a) cycle = true;
            if (!seen[s]) seen[s] = 1, todo.push_back(s);
          }
        }
      }
      if (cycle) {
        culprit = a;
        break;
      }
    }
    DSINFER_CHECK(culprit < 0, "rule '", origin_[culprit],
                  "' can never finish (every alternative recurses without a way out)");
  }

  const std::map<std::string, Expr>& rules_;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::map<ByteSet, Symbol> terminal_ids_;
  std::map<std::string, std::string> referenced_;  // name -> a rule that refers to it
  std::vector<std::string> origin_;  // per nonterminal: the named rule it comes from
  std::string current_;
  int fresh_count_ = 0;
};

std::string byte_set_text(const ByteSet& s) {
  std::ostringstream out;
  out << '[';
  for (int b = 0; b < 256; ++b) {
    if (!s.has(static_cast<uint8_t>(b))) continue;
    int e = b;
    while (e + 1 < 256 && s.has(static_cast<uint8_t>(e + 1))) ++e;
    auto put = [&](int v) {
      if (v > 0x20 && v < 0x7f && v != ']' && v != '\\' && v != '-') {
        out << static_cast<char>(v);
      } else {
        static const char* kHex = "0123456789abcdef";
        out << "\\x" << kHex[v >> 4] << kHex[v & 15];
      }
    };
    put(b);
    if (e > b) out << '-', put(e);
    b = e;
  }
  out << ']';
  return out.str();
}

}  // namespace

Grammar GrammarBuilder::build(const std::string& start) const {
  Grammar g = Lowerer(rules_).run(order_, start);
  g.mask_cache = std::make_shared<MaskCache>(g);
  return g;
}

std::string to_string(const Grammar& g) {
  std::ostringstream out;
  for (const auto& p : g.productions) {
    out << g.names[p.lhs] << " ::=";
    for (Symbol s : p.rhs) {
      out << ' ' << (is_terminal(s) ? byte_set_text(g.terminals[terminal_index(s)]) : g.names[s]);
    }
    out << '\n';
  }
  return out.str();
}

}  // namespace dsinfer::grammar
