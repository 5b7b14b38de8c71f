#include "grammar/mask_cache.h"

#include <algorithm>
#include <bit>
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
MaskCache::MaskCache(const Grammar& g) {
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
}

void MaskCache::Entry::apply(std::span<uint32_t> mask) const {
  if (!words.empty()) {
    for (size_t i = 0; i < words.size(); ++i) mask[i] |= words[i];
  } else {
    for (int32_t id : ids) mask[id >> 5] |= 1u << (id & 31);
  }
}

// The trie walk from one kernel item (or the start of the text) with a local Earley matcher: set 0 is
// the closure of predicting the item's left-hand side (what its origin set surely holds), set 1 the
// item's closure. Each walk state carries the bytes that the unknown rest of the context could scan
// next: none at first; after a completed item of set 0's origin, what may follow its nonterminal where
// the context (not set 0) waits for it; everything once such a byte was taken (the unknown items could
// then be anywhere). A byte the local set rejects is uncertain when the unknown part could scan it.
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
    }
  }

  MaskCache::Entry run() {
    const size_t n_words = (static_cast<size_t>(vocab_.size()) + 31) / 32;
    std::vector<uint32_t> words(n_words, 0);
    MaskCache::Entry out;
    const auto& nodes = vocab_.nodes();
    const auto& ids = vocab_.ids();
    std::vector<uint32_t> path_state{intern({}, ByteSet{})};
    std::vector<uint8_t> path;
    size_t real = 0;
    const ByteSet first = m_->allowed_bytes();  // the start state's unknown part scans nothing
    ByteSet all;
    all.words.fill(~uint64_t{0});
    for (uint32_t i = 0; i < nodes.size();) {
      const Vocabulary::Node& n = nodes[i];
      if (n.depth == 1 && !first.has(n.byte)) {
        i = n.end;
        continue;
      }
      const size_t parent_depth = n.depth - 1u;
      path.resize(parent_depth);
      path_state.resize(parent_depth + 1);
      if (real > parent_depth) {
        m_->rollback(real - parent_depth);
        real = parent_depth;
      }
      const uint64_t tkey = (uint64_t{path_state[parent_depth]} << 8) | n.byte;
      auto t = transitions_.find(tkey);
      int32_t next;
      if (t != transitions_.end()) {
        next = t->second;
      } else {
        const ByteSet unknown = unknown_[path_state[parent_depth]];
        for (; real < parent_depth; ++real) {
          const bool ok = m_->accept_byte(path[real]);
          DSINFER_CHECK_INTERNAL(ok, "mask cache walk: a cached transition did not replay");
        }
        if (m_->accept_byte(n.byte)) {
          ++real;
          next = static_cast<int32_t>(intern(path_state, unknown.has(n.byte) ? all : completed_context()));
        } else {
          next = unknown.has(n.byte) ? kUncertain : kRejected;
        }
        transitions_.emplace(tkey, next);
      }
      if (next < 0) {
        if (next == kUncertain) out.roots.push_back(i);
        i = n.end;
        continue;
      }
      path.push_back(n.byte);
      path_state.push_back(static_cast<uint32_t>(next));
      for (uint32_t k = n.ids_begin; k < n.ids_end; ++k) words[ids[k] >> 5] |= 1u << (ids[k] & 31);
      ++i;
    }
    size_t count = 0;
    for (uint32_t w : words) count += static_cast<size_t>(std::popcount(w));
    if (count < n_words) {
      for (size_t w = 0; w < n_words; ++w) {
        for (uint32_t bits = words[w]; bits != 0; bits &= bits - 1) {
          out.ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
        }
      }
    } else {
      out.words = std::move(words);
    }
    return out;
  }

 private:
  static constexpr int32_t kRejected = -1, kUncertain = -2;

  // What the context could scan after the last set: for each item of set 0's origin that completed in
  // it, the bytes that may follow its nonterminal where an item set 0 does not hold waits for it (an
  // occurrence at the start of a production set 0 predicted is set 0's own item, already advanced).
  ByteSet completed_context() {
    ByteSet out;
    if (!context_) return out;
    for (const auto& it : m_->last_set()) {
      if (it.origin >= base_ || m_->next_symbol(it) != EarleyMatcher::kNone) continue;
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

  // As TokenMatcher::intern_last_set, plus what the unknown context could scan next.
  uint32_t intern(const std::vector<uint32_t>& path_state, const ByteSet& unknown) {
    const size_t here = m_->bytes_accepted();
    struct Key {
      uint32_t prod, dot, tag, origin;
      bool operator<(const Key& o) const {
        return prod != o.prod ? prod < o.prod : dot != o.dot ? dot < o.dot : tag != o.tag ? tag < o.tag : origin < o.origin;
      }
    };
    std::vector<Key> keys;
    for (const EarleyMatcher::Item& it : m_->last_set()) {
      if (m_->next_symbol(it) == EarleyMatcher::kNone) continue;
      if (it.origin == here) {
        keys.push_back({it.prod, it.dot, 2, 0});
      } else if (it.origin <= base_) {
        keys.push_back({it.prod, it.dot, 0, it.origin});
      } else {
        keys.push_back({it.prod, it.dot, 1, path_state[it.origin - base_]});
      }
    }
    std::sort(keys.begin(), keys.end());
    std::string key(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(Key));
    key.append(reinterpret_cast<const char*>(unknown.words.data()), sizeof(unknown.words));
    auto [pos, inserted] = states_.emplace(std::move(key), static_cast<uint32_t>(states_.size()));
    if (inserted) unknown_.push_back(unknown);
    return pos->second;
  }

  const MaskCache& cache_;
  const Grammar& g_;
  const Vocabulary& vocab_;
  std::optional<EarleyMatcher> m_;
  size_t base_ = 0;
  bool context_ = false;
  std::vector<char> predicted_;  // per nonterminal: predicted in set 0
  std::vector<ByteSet> context_follow_;
  std::vector<char> context_follow_done_;
  std::unordered_map<std::string, uint32_t> states_;
  std::vector<ByteSet> unknown_;  // per state
  std::unordered_map<uint64_t, int32_t> transitions_;
};

std::shared_ptr<const MaskCache::Entry> MaskCache::entry(const std::shared_ptr<const Grammar>& g,
                                                         const std::shared_ptr<const Vocabulary>& vocab,
                                                         uint64_t key) {
  std::unique_lock<std::mutex> lock(mu_);
  PerVocabulary& v = by_vocab_[vocab.get()];
  if (!v.vocab) v.vocab = vocab;
  bool waited = false;
  while (true) {
    auto e = v.entries.find(key);
    if (e != v.entries.end()) {
      ++(waited ? stats_.waits : stats_.hits);
      return e->second;
    }
    if (!v.walking.contains(key)) break;
    // Another thread walks it: its result comes soon (or, should its walk fail or the entries be
    // dropped for the memory bound meanwhile, this thread walks it itself).
    walked_.wait(lock);
    waited = true;
  }
  v.walking.insert(key);
  // Ends the walk under the lock (taken again after the walk, also when it throws), whatever happens.
  struct Done {
    MaskCache& cache;
    PerVocabulary& v;
    uint64_t key;
    ~Done() {
      v.walking.erase(key);
      cache.walked_.notify_all();
    }
  } done{*this, v, key};
  std::shared_ptr<const Entry> made;
  {
    lock.unlock();
    struct Relock {
      std::unique_lock<std::mutex>& lock;
      ~Relock() { lock.lock(); }
    } relock{lock};
    made = std::make_shared<const Entry>(KernelWalk(*this, g, *vocab, key).run());
  }
  ++stats_.walks;
  if (v.bytes + made->bytes() > kMaxBytesPerVocabulary) {
    v.entries.clear();
    v.bytes = 0;
  }
  v.entries.emplace(key, made);
  v.bytes += made->bytes();
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
