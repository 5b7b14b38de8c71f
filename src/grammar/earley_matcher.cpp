#include "grammar/earley_matcher.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer::grammar {

namespace {
// Packs an item (prod < 2^20, dot < 2^16, origin < 2^28; see grammar.cpp's limits).
uint64_t key_of(uint32_t prod, uint32_t dot, uint32_t origin) {
  return (uint64_t{prod} << 44) | (uint64_t{dot} << 28) | origin;
}
uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}
constexpr size_t kMaxBytes = size_t{1} << 28;
}  // namespace

EarleyMatcher::EarleyMatcher(std::shared_ptr<const Grammar> grammar)
    : EarleyMatcher(grammar, grammar->start) {}

EarleyMatcher::EarleyMatcher(std::shared_ptr<const Grammar> grammar, int32_t start) : g_(std::move(grammar)) {
  seen_keys_.assign(64, 0);
  seen_gen_.assign(64, 0);
  ++gen_;
  seen_count_ = 0;
  set_begin_.push_back(0);
  waiting_begin_.push_back(0);
  for (int32_t p : g_->by_lhs[start]) add({static_cast<uint32_t>(p), 0, 0});
  close();
}

void EarleyMatcher::begin_set() {
  DSINFER_CHECK(bytes_accepted() + 1 < kMaxBytes, "grammar matcher input too long");
  set_begin_.push_back(static_cast<uint32_t>(items_.size()));
  ++gen_;
  if (gen_ == 0) {  // wrapped: start the table over
    std::fill(seen_gen_.begin(), seen_gen_.end(), 0);
    gen_ = 1;
  }
  seen_count_ = 0;
}

void EarleyMatcher::push_items(std::span<const Item> items) {
  begin_set();
  for (const Item& it : items) add(it);
  close();
}

void EarleyMatcher::add(const Item& it) {
  if (seen_count_ * 2 >= seen_keys_.size()) {
    // Grow and re-insert the current set's items.
    size_t cap = seen_keys_.size() * 2;
    seen_keys_.assign(cap, 0);
    seen_gen_.assign(cap, 0);
    gen_ = 1;
    seen_count_ = 0;
    for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
      uint64_t k = key_of(items_[i].prod, items_[i].dot, items_[i].origin);
      size_t h = mix(k) & (cap - 1);
      while (seen_gen_[h] == gen_) h = (h + 1) & (cap - 1);
      seen_gen_[h] = gen_;
      seen_keys_[h] = k;
      ++seen_count_;
    }
  }
  uint64_t k = key_of(it.prod, it.dot, it.origin);
  size_t mask = seen_keys_.size() - 1;
  size_t h = mix(k) & mask;
  while (seen_gen_[h] == gen_) {
    if (seen_keys_[h] == k) return;
    h = (h + 1) & mask;
  }
  seen_gen_[h] = gen_;
  seen_keys_[h] = k;
  ++seen_count_;
  items_.push_back(it);
}

void EarleyMatcher::close() {
  const uint32_t current = static_cast<uint32_t>(set_begin_.size() - 1);
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item it = items_[i];
    Symbol s = next_symbol(it);
    if (s == kNone) {
      // Complete: advance every item of the origin set waiting for this nonterminal. A closed set is
      // read through its list of such items (a right-recursive chain completes into every set of the
      // chain at each byte, and most items of a set wait for a byte, not a nonterminal).
      int32_t lhs = g_->productions[it.prod].lhs;
      if (it.origin == current) {
        for (size_t j = set_begin_[current]; j < items_.size(); ++j) {
          const Item w = items_[j];
          if (next_symbol(w) == lhs) add({w.prod, w.dot + 1, w.origin});
        }
      } else {
        const uint32_t end = waiting_begin_[it.origin + 1];
        for (uint32_t j = waiting_begin_[it.origin]; j < end; ++j) {
          const Item w = items_[waiting_[j]];
          if (next_symbol(w) == lhs) add({w.prod, w.dot + 1, w.origin});
        }
      }
    } else if (!is_terminal(s)) {
      for (int32_t p : g_->by_lhs[s]) add({static_cast<uint32_t>(p), 0, current});
      if (g_->nullable[s]) add({it.prod, it.dot + 1, it.origin});
    }
  }
  // The set is complete: its items that wait for a nonterminal, for later completions into it.
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Symbol s = next_symbol(items_[i]);
    if (s != kNone && !is_terminal(s)) waiting_.push_back(static_cast<uint32_t>(i));
  }
  waiting_begin_.push_back(static_cast<uint32_t>(waiting_.size()));
}

bool EarleyMatcher::accept_byte(uint8_t b) {
  const size_t begin = set_begin_.back();
  const size_t end = items_.size();
  begin_set();
  for (size_t i = begin; i < end; ++i) {
    const Item it = items_[i];
    Symbol s = next_symbol(it);
    if (s != kNone && is_terminal(s) && g_->terminals[terminal_index(s)].has(b)) {
      add({it.prod, it.dot + 1, it.origin});
    }
  }
  if (items_.size() == end) {
    set_begin_.pop_back();
    return false;
  }
  close();
  return true;
}

bool EarleyMatcher::accept_bytes(std::string_view text) {
  size_t done = 0;
  for (char c : text) {
    if (!accept_byte(static_cast<uint8_t>(c))) {
      rollback(done);
      return false;
    }
    ++done;
  }
  return true;
}

void EarleyMatcher::rollback(size_t n) {
  DSINFER_CHECK_INTERNAL(n <= bytes_accepted(), "grammar rollback of ", n, " bytes past the start");
  if (n == 0) return;
  size_t new_end = set_begin_[set_begin_.size() - n];
  set_begin_.resize(set_begin_.size() - n);
  items_.resize(new_end);
  waiting_begin_.resize(waiting_begin_.size() - n);
  waiting_.resize(waiting_begin_.back());
}

bool EarleyMatcher::is_complete() const {
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    const Item& it = items_[i];
    if (it.origin == 0 && next_symbol(it) == kNone && g_->productions[it.prod].lhs == g_->start) return true;
  }
  return false;
}

ByteSet EarleyMatcher::allowed_bytes() const {
  ByteSet out;
  for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
    Symbol s = next_symbol(items_[i]);
    if (s != kNone && is_terminal(s)) out.merge(g_->terminals[terminal_index(s)]);
  }
  return out;
}

}  // namespace dsinfer::grammar
