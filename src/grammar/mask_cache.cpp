#include "grammar/mask_cache.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.h"
#include "grammar/earley_matcher.h"

namespace dsinfer::grammar {

namespace {

// FIRST of rhs[from..]; `nullable` says whether all of it can vanish.
ByteSet first_of(const Grammar& g, const std::vector<ByteSet>& first, const std::vector<Symbol>& rhs, size_t from,
                 bool& nullable) {
  ByteSet out;
  for (size_t i = from; i < rhs.size(); ++i) {
    const Symbol s = rhs[i];
    if (is_terminal(s)) {
      out.merge(g.terminals[terminal_index(s)]);
      nullable = false;
      return out;
    }
    out.merge(first[s]);
    if (!g.nullable[s]) {
      nullable = false;
      return out;
    }
  }
  nullable = true;
  return out;
}

// Merges `add` into `into`; true when that changed it.
bool grow(ByteSet& into, const ByteSet& add) {
  ByteSet merged = into;
  merged.merge(add);
  if (merged == into) return false;
  into = merged;
  return true;
}

}  // namespace

// FIRST and FOLLOW by worklists (a set grows at most 256 times, so the work is linear in the grammar
// times 256 whatever the order of the productions: a bounded repeat's chain of thousands of rules
// would take a round-robin fixpoint thousands of passes).
MaskCache::MaskCache(const Grammar& g, bool share_chains) {
  const size_t n = g.by_lhs.size();
  std::vector<ByteSet> first(n), follow(n);
  // FIRST: a production is revisited when the FIRST of a nonterminal in its nullable prefix grew.
  std::vector<std::vector<int32_t>> first_users(n);
  for (size_t k = 0; k < g.productions.size(); ++k) {
    for (Symbol s : g.productions[k].rhs) {
      if (is_terminal(s)) break;
      first_users[s].push_back(static_cast<int32_t>(k));
      if (!g.nullable[s]) break;
    }
  }
  std::vector<int32_t> work(g.productions.size());
  for (size_t k = 0; k < work.size(); ++k) work[k] = static_cast<int32_t>(k);
  while (!work.empty()) {
    const auto& p = g.productions[work.back()];
    work.pop_back();
    bool nullable;
    if (grow(first[p.lhs], first_of(g, first, p.rhs, 0, nullable))) {
      work.insert(work.end(), first_users[p.lhs].begin(), first_users[p.lhs].end());
    }
  }
  // Per occurrence, what follows it inside its production (right to left: FIRST of each suffix), and
  // the FOLLOW edges lhs -> nonterminal where the rest can vanish.
  struct Site {
    int32_t prod;
    uint32_t dot;
    ByteSet inside;
    bool vanishing_rest;
  };
  std::vector<std::vector<Site>> sites(n);
  std::vector<std::vector<int32_t>> follow_edges(n);  // per lhs: nonterminals whose FOLLOW includes it
  for (size_t k = 0; k < g.productions.size(); ++k) {
    const auto& p = g.productions[k];
    ByteSet suffix;
    bool suffix_nullable = true;
    for (size_t i = p.rhs.size(); i-- > 0;) {
      const Symbol s = p.rhs[i];
      if (!is_terminal(s)) {
        sites[s].push_back({static_cast<int32_t>(k), static_cast<uint32_t>(i), suffix, suffix_nullable});
        grow(follow[s], suffix);
        if (suffix_nullable) follow_edges[p.lhs].push_back(s);
      }
      if (is_terminal(s)) {
        suffix = g.terminals[terminal_index(s)];
        suffix_nullable = false;
      } else if (g.nullable[s]) {
        suffix.merge(first[s]);
      } else {
        suffix = first[s];
        suffix_nullable = false;
      }
    }
  }
  std::vector<int32_t> pending(n);
  for (size_t x = 0; x < n; ++x) pending[x] = static_cast<int32_t>(x);
  while (!pending.empty()) {
    const int32_t y = pending.back();
    pending.pop_back();
    for (int32_t x : follow_edges[y]) {
      if (grow(follow[x], follow[y])) pending.push_back(x);
    }
  }
  occurrences_.resize(n);
  for (size_t x = 0; x < n; ++x) {
    for (const Site& site : sites[x]) {
      ByteSet f = site.inside;
      if (site.vanishing_rest) f.merge(follow[g.productions[site.prod].lhs]);
      occurrences_[x].push_back({site.prod, site.dot, f});
    }
  }
  chain_steps_.resize(g.productions.size());
  chain_index_.assign(n, 0);
  chain_bottom_.assign(n, -1);
  if (share_chains) find_chains(g);
}

// Finds the chains by their shape in the lowered grammar, whoever wrote them (the lowering of a bounded
// repeat, or a user's rules of the same shape): N_1 has exactly the productions e and x, each N_a (a >= 2)
// exactly e and x N_(a-1), with one symbol x for the whole chain. A member's index is its distance to
// the bottom N_1 along those links, so two members of one index (two rules linking to one N_(a-1)) are
// alike too. A chain's positions are shareable when x cannot vanish and no member of the chain can be
// reached from x (then a walk from N_i -> x . N_(i-1) meets the chain only through the members below
// N_i, one per x scanned; README "Walk sharing in bounded repeats").
void MaskCache::find_chains(const Grammar& g) {
  const size_t n = g.by_lhs.size();
  constexpr int32_t kNoLink = -2, kBottom = -1;
  std::vector<int32_t> link(n, kNoLink);
  std::vector<Symbol> x_of(n, 0);
  std::vector<int32_t> step_prod(n, -1);  // per member: its production x N_(a-1) (or x at the bottom)
  for (size_t a = 0; a < n; ++a) {
    const auto& prods = g.by_lhs[a];
    if (prods.size() != 2) continue;
    const auto& r0 = g.productions[prods[0]].rhs;
    const auto& r1 = g.productions[prods[1]].rhs;
    if (!r0.empty() && !r1.empty()) continue;
    const int32_t p = r0.empty() ? prods[1] : prods[0];
    const auto& rhs = g.productions[p].rhs;
    if (rhs.empty() || rhs.size() > 2 || rhs[0] == static_cast<Symbol>(a)) continue;
    if (rhs.size() == 2 && (is_terminal(rhs[1]) || rhs[1] == static_cast<Symbol>(a))) continue;
    link[a] = rhs.size() == 1 ? kBottom : rhs[1];
    x_of[a] = rhs[0];
    step_prod[a] = p;
  }
  // Indexes along the links, iteratively (chains are thousands long); a cycle of links, a link to a
  // rule of another shape or of another x ends in no chain.
  std::vector<char> done(n, 0);
  std::vector<int32_t> path;
  for (size_t a0 = 0; a0 < n; ++a0) {
    if (done[a0] || link[a0] == kNoLink) continue;
    path.clear();
    int32_t b = static_cast<int32_t>(a0);
    int32_t index = 0, bottom = -1;
    while (true) {
      if (done[b]) {
        index = chain_index_[b];
        bottom = chain_bottom_[b];
        break;
      }
      if (link[b] == kNoLink) break;
      done[b] = 1;  // on the path: met again, a cycle (index stays 0)
      path.push_back(b);
      if (link[b] == kBottom) {
        bottom = b;
        break;
      }
      b = link[b];
    }
    // From the deepest member of the path up.
    for (size_t k = path.size(); k-- > 0;) {
      const int32_t a = path[k];
      if (a == bottom) {
        index = 1;
      } else if (index > 0 && bottom >= 0 && x_of[a] == x_of[bottom]) {
        ++index;
      } else {
        index = 0, bottom = -1;
      }
      chain_index_[a] = index;
      chain_bottom_[a] = index > 0 ? bottom : -1;
    }
  }
  // Which chains are shareable, and each position's FOLLOW. Per x, once: the chains (bottoms) of the
  // members reachable from it.
  std::unordered_map<Symbol, std::vector<int32_t>> reach_of;
  std::unordered_map<int32_t, char> shareable;  // per bottom
  for (size_t a = 0; a < n; ++a) {
    const int32_t bottom = chain_bottom_[a];
    if (chain_index_[a] < 2 || bottom < 0) continue;
    auto ok = shareable.find(bottom);
    if (ok == shareable.end()) {
      const Symbol x = x_of[bottom];
      bool fine = true;
      if (!is_terminal(x)) {
        fine = !g.nullable[x];
        auto r = reach_of.find(x);
        if (r == reach_of.end()) {
          std::vector<char> seen(n, 0);
          std::vector<int32_t> todo{x};
          seen[x] = 1;
          while (!todo.empty()) {
            const int32_t y = todo.back();
            todo.pop_back();
            for (int32_t p : g.by_lhs[y]) {
              for (Symbol s : g.productions[p].rhs) {
                if (!is_terminal(s) && !seen[s]) seen[s] = 1, todo.push_back(s);
              }
            }
          }
          std::vector<int32_t> bottoms;
          for (size_t y = 0; y < n; ++y) {
            if (seen[y] && chain_bottom_[y] >= 0) bottoms.push_back(chain_bottom_[y]);
          }
          std::sort(bottoms.begin(), bottoms.end());
          r = reach_of.emplace(x, std::move(bottoms)).first;
        }
        fine = fine && !std::binary_search(r->second.begin(), r->second.end(), bottom);
      }
      ok = shareable.emplace(bottom, fine ? 1 : 0).first;
    }
    if (!ok->second) continue;
    ChainStep& step = chain_steps_[step_prod[a]];
    step.bottom = bottom;
    step.index = chain_index_[a];
    for (const Occurrence& occ : occurrences_[a]) step.follow.merge(occ.follow);
  }
}

void MaskCache::Entry::apply(std::span<uint32_t> mask) const {
  if (!words.empty()) {
    for (size_t i = 0; i < words.size(); ++i) mask[i] |= words[i];
  } else {
    for (int32_t id : ids) mask[id >> 5] |= 1u << (id & 31);
  }
}

// The trie walk from one kernel item (or the start of the text): set 0 is the closure of predicting the
// item's left-hand side (what its origin set surely holds), set 1 the item's closure, both built by a
// real EarleyMatcher that never moves past them. The walk's own Earley sets are interned by their
// canonical content (items that still wait, each origin named as a position at or before set 1, as
// the interned state where it started, or as "here"; as TokenMatcher::intern_last_set does), and a
// step from a state is taken from that content alone: a completion whose origin is a state reads that
// state's items (equal content, equal futures). So a new transition costs one Earley step, never a
// replay of the path to it (a right-recursive bounded string's sets grow with the depth, and replays
// were two thirds of the steps). Each state also carries the bytes that the unknown rest of the context
// could scan next: none at first; after a completed item of set 0's origin, what may follow its
// nonterminal where the context (not set 0) waits for it; everything once such a byte was taken (the
// unknown items could then be anywhere). A byte the local set rejects is uncertain when the unknown part
// could scan it.
class KernelWalk {
 public:
  KernelWalk(const MaskCache& cache, const std::shared_ptr<const Grammar>& g, const Vocabulary& vocab, uint64_t key)
      : cache_(cache), g_(*g), vocab_(vocab) {
    if (key == MaskCache::kStartKey) {
      m_.emplace(g);  // no context: completions at 0 look into the real set 0
      base_ = 0;
      context_ = false;
    } else {
      const auto prod = static_cast<uint32_t>(key >> 32), dot = static_cast<uint32_t>(key);
      DSINFER_CHECK_INTERNAL(prod < g_.productions.size() && dot < g_.productions[prod].rhs.size(),
                             "mask cache: no item ", prod, ".", dot);
      m_.emplace(g, g_.productions[prod].lhs);
      const EarleyMatcher::Item item{prod, dot, 0};
      m_->push_items(std::span<const EarleyMatcher::Item>(&item, 1));
      base_ = 1;
      context_ = true;
      predicted_.assign(g_.by_lhs.size(), 0);
      for (const auto& it : m_->set(0)) {
        if (it.dot == 0) predicted_[g_.productions[it.prod].lhs] = 1;
      }
      context_follow_.resize(g_.by_lhs.size());
      context_follow_done_.assign(g_.by_lhs.size(), 0);
      const MaskCache::ChainStep& chain = cache_.chain_steps_[prod];
      if (dot == 1 && chain.bottom >= 0) {  // a chain position: note how deep into the chain it predicts
        chain_bottom_ = chain.bottom;
        top_ = chain.index;
        lowest_ = chain.index - 1;  // set 1 predicted N_(i-1)
      }
    }
    all_.words.fill(~uint64_t{0});
  }

  // The whole walk.
  MaskCache::Entry run() {
    Walked w = walk(nullptr);
    return pack(std::move(w.words), std::move(w.roots));
  }

  // Walks only under the trie nodes `cut` (ascending, none inside another's subtree) and the paths to
  // them: the accepted tokens and uncertain roots inside those subtrees (a chain position's walk derived
  // from another position's). nullopt when a path to them is refused (never, by the argument in the
  // README: the caller then walks in full).
  struct Walked {
    std::vector<uint32_t> words;
    std::vector<uint32_t> roots;
  };
  std::optional<Walked> walk_under(const std::vector<uint32_t>& cut) {
    Walked w = walk(&cut);
    if (failed_) return std::nullopt;
    return w;
  }

  // An entry from accepted tokens (a bitmask) and roots: ids when fewer than the mask's words.
  static MaskCache::Entry pack(std::vector<uint32_t> words, std::vector<uint32_t> roots) {
    MaskCache::Entry out;
    out.roots = std::move(roots);
    size_t count = 0;
    for (uint32_t w : words) count += static_cast<size_t>(std::popcount(w));
    if (count < words.size()) {
      for (size_t w = 0; w < words.size(); ++w) {
        for (uint32_t bits = words[w]; bits != 0; bits &= bits - 1) {
          out.ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
        }
      }
    } else {
      out.words = std::move(words);
    }
    return out;
  }

  // A chain position's full walk (after run()): where along the trie's paths it predicted chain members
  // at least MaskCache::kMinMarkDepth below its own (ascending nodes; README).
  std::vector<MaskCache::ChainMark> take_marks() { return std::move(marks_); }

  // For a chain position's walk (after run()): the lowest chain member it predicted.
  int32_t lowest_member() const { return lowest_; }

 private:
  Walked walk(const std::vector<uint32_t>* cut) {
    const size_t n_words = (static_cast<size_t>(vocab_.size()) + 31) / 32;
    Walked out;
    out.words.assign(n_words, 0);
    const auto& nodes = vocab_.nodes();
    const auto& ids = vocab_.ids();
    // The start state: the real matcher's last set (set 1, or set 0 for the start of the text).
    building_.clear();
    for (const EarleyMatcher::Item& it : m_->last_set()) {
      building_.push_back(it.origin == base_ ? Item{it.prod, it.dot, kHere, 0} : Item{it.prod, it.dot, kAt, it.origin});
    }
    // Per depth of the walk's path, the state there (sized for the deepest token once: a node costs no
    // resize; entries past the current depth are stale, never read), and for a chain position the
    // lowest chain member predicted along the path.
    std::vector<uint32_t> path_state(vocab_.max_depth() + 2);
    path_state[0] = intern(ByteSet{});  // the start state's unknown part scans nothing
    root_ = path_state[0];
    const bool marking = chain_bottom_ >= 0 && cut == nullptr;
    std::vector<int32_t> path_low(marking ? path_state.size() : 0);
    if (marking) path_low[0] = states_low_[root_];
    size_t next_cut = 0;
    uint32_t inside_end = 0;  // with cut: the end of the cut subtree being walked
    for (uint32_t i = 0; i < nodes.size();) {
      const Vocabulary::Node& n = nodes[i];
      if (cut != nullptr && i >= inside_end) {  // outside the cut subtrees: only the paths to them
        while (next_cut < cut->size() && (*cut)[next_cut] < i) ++next_cut;
        if (next_cut == cut->size()) break;
        if ((*cut)[next_cut] == i) {
          inside_end = n.end;
        } else if ((*cut)[next_cut] >= n.end) {
          i = n.end;
          continue;
        }
      }
      const bool record = cut == nullptr || i < inside_end;
      const uint32_t from = path_state[n.depth - 1u];
      const size_t at = size_t{from} * 256 + n.byte;
      int32_t next = transitions_[at];
      if (next == kUnknown) {  // a byte the state scans, first met: one Earley step
        next = static_cast<int32_t>(step(from, n.byte));
        transitions_[at] = next;
      }
      if (next < 0) {
        if (!record) {  // a path to a cut node refused
          failed_ = true;
          return out;
        }
        if (next == kUncertain) out.roots.push_back(i);
        i = n.end;
        continue;
      }
      path_state[n.depth] = static_cast<uint32_t>(next);
      if (marking) {
        const int32_t above = path_low[n.depth - 1u];
        const int32_t low = std::min(above, states_low_[static_cast<size_t>(next)]);
        path_low[n.depth] = low;
        if (low < above && top_ - 1 - low >= MaskCache::kMinMarkDepth) marks_.push_back({i, low});
      }
      if (record) {
        for (uint32_t k = n.ids_begin; k < n.ids_end; ++k) out.words[ids[k] >> 5] |= 1u << (ids[k] & 31);
      }
      ++i;
    }
    return out;
  }

  static constexpr int32_t kRejected = -1, kUncertain = -2, kUnknown = -3;
  // An item of a walk state; the origin by kind: a real set (kAt: its position, at or before base_), an
  // interned state (kState: its id), or the state itself (kHere).
  static constexpr uint32_t kAt = 0, kState = 1, kHere = 2;
  struct Item {
    uint32_t prod, dot, tag, origin;
  };

  Symbol next_symbol(uint32_t prod, uint32_t dot) const {
    const auto& rhs = g_.productions[prod].rhs;
    return dot < rhs.size() ? rhs[dot] : EarleyMatcher::kNone;
  }

  // Adds an item to the set being built unless it is there (open addressing, cleared by generation).
  void add(const Item& it) {
    if (seen_count_ * 2 >= seen_keys_.size()) {
      const size_t cap = std::max<size_t>(64, seen_keys_.size() * 2);
      seen_keys_.assign(cap, 0);
      seen_gen_.assign(cap, 0);
      gen_ = 1;
      seen_count_ = 0;
      for (const Item& old : building_) insert_seen(pack(old));
    }
    if (insert_seen(pack(it))) building_.push_back(it);
  }
  static uint64_t pack(const Item& it) {  // prod < 2^20, dot < 2^16 (grammar.cpp's limits); ids < 2^26
    return (uint64_t{it.prod} << 44) | (uint64_t{it.dot} << 28) | (uint64_t{it.tag} << 26) | it.origin;
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
  }
  bool has_seen(uint64_t k) const {
    const size_t mask = seen_keys_.size() - 1;
    for (size_t p = mix(k) & mask; seen_gen_[p] == gen_; p = (p + 1) & mask) {
      if (seen_keys_[p] == k) return true;
    }
    return false;
  }
  bool insert_seen(uint64_t k) {
    const size_t mask = seen_keys_.size() - 1;
    for (size_t p = mix(k) & mask;; p = (p + 1) & mask) {
      if (seen_gen_[p] != gen_) {
        seen_gen_[p] = gen_;
        seen_keys_[p] = k;
        ++seen_count_;
        return true;
      }
      if (seen_keys_[p] == k) return false;
    }
  }
  void begin_set() {
    building_.clear();
    seen_count_ = 0;
    if (++gen_ == 0) {  // wrapped: start the table over
      std::fill(seen_gen_.begin(), seen_gen_.end(), 0);
      gen_ = 1;
    }
  }

  // An item of state `s` advanced past its next symbol, its origin named from the new set.
  Item advanced(const Item& w, uint32_t s) const {
    if (w.tag != kHere) return {w.prod, w.dot + 1, w.tag, w.origin};
    // Started at s: the start state is the real set base_, any other an interned state.
    return s == root_ ? Item{w.prod, w.dot + 1, kAt, static_cast<uint32_t>(base_)} : Item{w.prod, w.dot + 1, kState, s};
  }

  // The Earley step from state s on byte b (one it scans): scan, then complete and predict, as
  // EarleyMatcher::accept_byte does over real sets.
  uint32_t step(uint32_t s, uint8_t b) {
    begin_set();
    for (const Item& it : states_items_[s]) {
      const Symbol sym = next_symbol(it.prod, it.dot);
      if (is_terminal(sym) && g_.terminals[terminal_index(sym)].has(b)) add(advanced(it, s));
    }
    DSINFER_CHECK_INTERNAL(!building_.empty(), "mask cache walk: an allowed byte was refused");
    for (size_t i = 0; i < building_.size(); ++i) {
      const Item it = building_[i];
      const Symbol sym = next_symbol(it.prod, it.dot);
      if (sym == EarleyMatcher::kNone) {
        const int32_t lhs = g_.productions[it.prod].lhs;
        if (it.tag == kHere) {
          const size_t end = building_.size();
          for (size_t j = 0; j < end; ++j) {
            const Item w = building_[j];
            if (next_symbol(w.prod, w.dot) == lhs) add({w.prod, w.dot + 1, w.tag, w.origin});
          }
        } else if (it.tag == kState) {
          for (const Item& w : states_waiting_[it.origin]) {
            if (next_symbol(w.prod, w.dot) == lhs) add(advanced(w, it.origin));
          }
        } else {
          for (const EarleyMatcher::Item& w : m_->set(it.origin)) {
            if (m_->next_symbol(w) == lhs) add({w.prod, w.dot + 1, kAt, w.origin});
          }
        }
      } else if (!is_terminal(sym)) {
        if (cache_.chain_bottom_[sym] == chain_bottom_ && chain_bottom_ >= 0) {
          lowest_ = std::min(lowest_, cache_.chain_index_[sym]);
        }
        for (int32_t p : g_.by_lhs[sym]) add({static_cast<uint32_t>(p), 0, kHere, 0});
        if (g_.nullable[sym]) add({it.prod, it.dot + 1, it.tag, it.origin});
      }
    }
    return intern(unknown_[s].has(b) ? all_ : completed_context());
  }

  // What the context could scan after the set being built: for each item of set 0's origin that
  // completed in it, the bytes that may follow its nonterminal where an item set 0 does not hold waits
  // for it (an occurrence at the start of a production set 0 predicted is set 0's own item, already
  // advanced).
  ByteSet completed_context() {
    ByteSet out;
    if (!context_) return out;
    for (const Item& it : building_) {
      if (it.tag != kAt || it.origin >= base_ || next_symbol(it.prod, it.dot) != EarleyMatcher::kNone) continue;
      const int32_t lhs = g_.productions[it.prod].lhs;
      if (!context_follow_done_[lhs]) {
        ByteSet f;
        for (const auto& occ : cache_.occurrences_[lhs]) {
          if (occ.dot == 0 && predicted_[g_.productions[occ.prod].lhs]) continue;
          f.merge(occ.follow);
        }
        context_follow_[lhs] = f;
        context_follow_done_[lhs] = 1;
      }
      out.merge(context_follow_[lhs]);
    }
    return out;
  }

  // The state of the set being built: its items that still wait (completed ones never act again), as a
  // set, plus what the unknown context could scan next. Looked up by an order-free hash of the items
  // and confirmed exactly: a state of as many items whose every item is in the set being built (no sort
  // and no key string per step; most steps lead to a known state).
  uint32_t intern(const ByteSet& unknown) {
    uint64_t h = 0;
    size_t n = 0;
    for (const Item& it : building_) {
      if (next_symbol(it.prod, it.dot) == EarleyMatcher::kNone) continue;
      h += mix(pack(it));
      ++n;
    }
    for (uint64_t w : unknown.words) h = mix(h ^ w);
    for (auto [c, end] = by_hash_.equal_range(h); c != end; ++c) {
      const uint32_t id = c->second;
      if (states_items_[id].size() != n || !(unknown_[id] == unknown)) continue;
      bool same = true;
      for (const Item& it : states_items_[id]) {
        if (!(same = has_seen(pack(it)))) break;
      }
      if (same) return id;
    }
    const auto id = static_cast<uint32_t>(states_items_.size());
    DSINFER_CHECK_INTERNAL(id < (1u << 26), "mask cache walk: too many states");
    by_hash_.emplace(h, id);
    std::vector<Item> items, waiting;
    ByteSet scans;
    int32_t low = INT32_MAX;
    for (const Item& it : building_) {
      const Symbol sym = next_symbol(it.prod, it.dot);
      if (sym == EarleyMatcher::kNone) continue;
      items.push_back(it);
      const int32_t lhs = g_.productions[it.prod].lhs;
      if (chain_bottom_ >= 0 && cache_.chain_bottom_[lhs] == chain_bottom_) low = std::min(low, cache_.chain_index_[lhs]);
      if (is_terminal(sym)) {
        scans.merge(g_.terminals[terminal_index(sym)]);
      } else {
        waiting.push_back(it);
      }
    }
    // The state's row of transitions: a byte no item scans is refused without an Earley step,
    // uncertain where the unknown context could scan it.
    for (int b = 0; b < 256; ++b) {
      const auto byte = static_cast<uint8_t>(b);
      transitions_.push_back(scans.has(byte) ? kUnknown : unknown.has(byte) ? kUncertain : kRejected);
    }
    states_items_.push_back(std::move(items));
    states_waiting_.push_back(std::move(waiting));
    unknown_.push_back(unknown);
    states_low_.push_back(low);
    return id;
  }

  const MaskCache& cache_;
  const Grammar& g_;
  const Vocabulary& vocab_;
  std::optional<EarleyMatcher> m_;  // holds the real sets 0..base_, never moves past them
  size_t base_ = 0;
  bool context_ = false;
  uint32_t root_ = 0;
  ByteSet all_;
  std::vector<char> predicted_;  // per nonterminal: predicted in set 0
  std::vector<ByteSet> context_follow_;
  std::vector<char> context_follow_done_;
  // A chain position's walk: its chain, its index, the lowest member predicted, per state the lowest
  // member among its items, and the marks (take_marks).
  int32_t chain_bottom_ = -1;
  int32_t top_ = 0;
  int32_t lowest_ = 0;
  std::vector<int32_t> states_low_;
  std::vector<MaskCache::ChainMark> marks_;
  bool failed_ = false;
  std::unordered_multimap<uint64_t, uint32_t> by_hash_;  // states by the hash of their items
  std::vector<std::vector<Item>> states_items_;           // per state: its waiting items
  // Per state: those of its items that wait for a nonterminal (what a completion into it reads; most
  // items of a set wait for a byte, and a right-recursive chain completes into every set of the chain).
  std::vector<std::vector<Item>> states_waiting_;
  std::vector<ByteSet> unknown_;                 // per state
  std::vector<int32_t> transitions_;  // per state, 256 entries: the next state, kRejected, kUncertain or kUnknown
  // The set being built, and its membership.
  std::vector<Item> building_;
  std::vector<uint64_t> seen_keys_;
  std::vector<uint32_t> seen_gen_;
  uint32_t gen_ = 0;
  size_t seen_count_ = 0;
};

namespace {

// Position N_j's entry from another position's entry `rep`: outside the trie subtrees `cut`, rep's
// accepted tokens and roots; inside them, `under` (N_j's own walk there).
MaskCache::Entry derive_entry(const MaskCache::Entry& rep, const std::vector<uint32_t>& cut, const Vocabulary& vocab,
                              std::vector<uint32_t> under_words, const std::vector<uint32_t>& under_roots) {
  std::vector<uint32_t> words = rep.words;
  if (words.empty()) {
    words.assign(under_words.size(), 0);
    for (int32_t id : rep.ids) words[id >> 5] |= 1u << (id & 31);
  }
  const auto& nodes = vocab.nodes();
  const auto& ids = vocab.ids();
  for (uint32_t c : cut) {
    for (uint32_t i = c; i < nodes[c].end; ++i) {
      for (uint32_t k = nodes[i].ids_begin; k < nodes[i].ids_end; ++k) words[ids[k] >> 5] &= ~(1u << (ids[k] & 31));
    }
  }
  for (size_t w = 0; w < words.size(); ++w) words[w] |= under_words[w];
  std::vector<uint32_t> roots;
  size_t c = 0;
  for (uint32_t r : rep.roots) {
    while (c < cut.size() && nodes[cut[c]].end <= r) ++c;
    if (c < cut.size() && cut[c] <= r) continue;  // inside a cut subtree: `under_roots` has it
    roots.push_back(r);
  }
  roots.insert(roots.end(), under_roots.begin(), under_roots.end());
  std::sort(roots.begin(), roots.end());
  return KernelWalk::pack(std::move(words), std::move(roots));
}

}  // namespace

std::shared_ptr<const MaskCache::Entry> MaskCache::entry(const std::shared_ptr<const Grammar>& g,
                                                         const std::shared_ptr<const Vocabulary>& vocab,
                                                         uint64_t key) {
  std::unique_lock<std::mutex> lock(mu_);
  PerVocabulary& v = by_vocab_[vocab.get()];
  if (!v.vocab) v.vocab = vocab;
  // A chain position (N_i -> x . N_(i-1)): its chain and the walks of the chain it may share.
  const ChainStep* chain = nullptr;
  if (key != kStartKey && (key >> 32) < chain_steps_.size() && static_cast<uint32_t>(key) == 1 &&
      chain_steps_[key >> 32].bottom >= 0) {
    chain = &chain_steps_[key >> 32];
  }
  // Stores an entry under the lock, within the memory bound.
  auto store = [&](const std::shared_ptr<const Entry>& e, size_t bytes) {
    if (v.bytes + bytes > kMaxBytesPerVocabulary) {
      v.entries.clear();
      v.shared.clear();
      v.bytes = 0;
    }
    v.entries.emplace(key, e);
    v.bytes += bytes;
  };
  // The other position's walk this one is derived from (null: walked in full), and where they differ.
  std::shared_ptr<const Entry> rep;
  std::vector<uint32_t> cut;
  bool waited = false;
  while (true) {
    auto e = v.entries.find(key);
    if (e != v.entries.end()) {
      ++(waited ? stats_.waits : stats_.hits);
      return e->second;
    }
    if (chain != nullptr) {
      auto s = v.shared.find(chain->bottom);
      const SharedWalk* nearest = nullptr;
      if (s != v.shared.end()) {
        for (const SharedWalk& w : s->second) {
          if (!(w.follow == chain->follow)) continue;
          if (w.lowest + std::min(chain->index - w.index, 0) >= 2) {
            std::shared_ptr<const Entry> same = w.entry;  // `store` may drop `w`
            ++stats_.shared;
            store(same, kSharedEntryBytes);
            return same;
          }
          if (w.index >= kMinMarkDepth + 3 && chain->index >= kMinMarkDepth + 3 &&
              (nearest == nullptr || std::abs(w.index - chain->index) < std::abs(nearest->index - chain->index))) {
            nearest = &w;
          }
        }
      }
      if (nearest != nullptr && !v.walking.contains(key)) {
        // Topmost marks whose member, shifted, falls below N_2 (or is N_1 itself).
        const int32_t shift = std::min(chain->index - nearest->index, 0);
        const auto& nodes = vocab->nodes();
        cut.clear();
        for (const ChainMark& m : *nearest->marks) {
          if (m.low + shift >= 2) continue;
          if (!cut.empty() && m.node < nodes[cut.back()].end) continue;
          cut.push_back(m.node);
        }
        rep = nearest->entry;
        break;
      }
    }
    // Another thread walks it, or another position of its chain (whose walk may stand for this one):
    // its result comes soon (or, should its walk fail, not cover this position, or the entries be
    // dropped for the memory bound meanwhile, this thread walks it itself).
    if (!v.walking.contains(key) && (chain == nullptr || !v.walking_chains.contains(chain->bottom))) break;
    walked_.wait(lock);
    waited = true;
  }
  v.walking.insert(key);
  const bool full = rep == nullptr;
  if (chain != nullptr && full) v.walking_chains.insert(chain->bottom);
  // Ends the walk under the lock (taken again after the walk, also when it throws), whatever happens.
  struct Done {
    MaskCache& cache;
    PerVocabulary& v;
    uint64_t key;
    const ChainStep* chain;
    ~Done() {
      v.walking.erase(key);
      if (chain != nullptr) v.walking_chains.erase(chain->bottom);
      cache.walked_.notify_all();
    }
  } done{*this, v, key, chain != nullptr && full ? chain : nullptr};
  std::shared_ptr<const Entry> made;
  std::shared_ptr<const std::vector<ChainMark>> marks;
  int32_t lowest = 0;
  {
    lock.unlock();
    struct Relock {
      std::unique_lock<std::mutex>& lock;
      ~Relock() { lock.lock(); }
    } relock{lock};
    if (!full) {
      KernelWalk walk(*this, g, *vocab, key);
      if (auto under = walk.walk_under(cut)) {
        made = std::make_shared<const Entry>(derive_entry(*rep, cut, *vocab, std::move(under->words), under->roots));
      }
    }
    if (made == nullptr) {
      KernelWalk walk(*this, g, *vocab, key);
      made = std::make_shared<const Entry>(walk.run());
      lowest = walk.lowest_member();
      marks = std::make_shared<const std::vector<ChainMark>>(walk.take_marks());
    }
  }
  ++stats_.walks;
  if (!full && marks == nullptr) ++stats_.derived;
  store(made, made->bytes());
  if (chain != nullptr && marks != nullptr) {
    // Kept per FOLLOW: the walk of the highest position (it reaches least far down the chain); its
    // marks count toward the memory bound.
    auto& walks = v.shared[chain->bottom];
    auto same = std::find_if(walks.begin(), walks.end(), [&](const SharedWalk& w) { return w.follow == chain->follow; });
    if (same == walks.end() || chain->index > same->index) {
      const SharedWalk w{chain->index, lowest, chain->follow, made, marks};
      if (same == walks.end()) {
        walks.push_back(w);
      } else {
        *same = w;
      }
      v.bytes += marks->size() * sizeof(ChainMark);
    }
  }
  return made;
}

MaskCache::Stats MaskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  for (const auto& [ptr, v] : by_vocab_) {
    s.entries += v.entries.size();
    s.bytes += v.bytes;
  }
  return s;
}

}  // namespace dsinfer::grammar
