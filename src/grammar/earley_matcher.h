// A byte-level Earley recognizer over a lowered Grammar, with rollback: one Earley set per byte
// accepted, kept so that popping sets undoes bytes exactly (speculation, token-mask trie walks).
// Nullable rules follow Aycock and Horspool (a predicted nullable nonterminal is skipped at once), and
// repeats lower to left recursion, so sets stay small on long outputs.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

class EarleyMatcher {
 public:
  explicit EarleyMatcher(std::shared_ptr<const Grammar> grammar);
  // Set 0 predicts `start` instead of the grammar's start (the context-free part of any set where
  // `start` was predicted: the token-mask cache's walks from one Earley item).
  EarleyMatcher(std::shared_ptr<const Grammar> grammar, int32_t start);

  // Accepts one byte if the grammar allows it here; on false nothing changed.
  bool accept_byte(uint8_t b);
  // All bytes or none.
  bool accept_bytes(std::string_view text);
  // Undoes the last n accepted bytes (n <= bytes_accepted()).
  void rollback(size_t n);
  void reset() { rollback(bytes_accepted()); }

  size_t bytes_accepted() const { return set_begin_.size() - 1; }
  // The input so far is a complete sentence of the grammar.
  bool is_complete() const;
  // The bytes that may come next (empty: nothing more can follow).
  ByteSet allowed_bytes() const;

  const Grammar& grammar() const { return *g_; }

  // An Earley item: production, dot, and the position (bytes accepted) where the production started.
  struct Item {
    uint32_t prod;
    uint32_t dot;
    uint32_t origin;
  };
  static constexpr Symbol kNone = INT32_MIN;
  // Starts a new set with the given items (as if a byte had advanced them) and closes it.
  void push_items(std::span<const Item> items);
  // The items of the current position (what the next byte is matched against).
  std::span<const Item> last_set() const {
    return std::span<const Item>(items_.data() + set_begin_.back(), items_.size() - set_begin_.back());
  }
  // The items of set k (k <= bytes_accepted()).
  std::span<const Item> set(size_t k) const {
    const size_t end = k + 1 < set_begin_.size() ? set_begin_[k + 1] : items_.size();
    return std::span<const Item>(items_.data() + set_begin_[k], end - set_begin_[k]);
  }
  Symbol next_symbol(const Item& it) const {
    const auto& rhs = g_->productions[it.prod].rhs;
    return it.dot < rhs.size() ? rhs[it.dot] : kNone;
  }

 private:
  void begin_set();
  void add(const Item& it);
  void close();  // completes and predicts the set being built

  std::shared_ptr<const Grammar> g_;
  std::vector<Item> items_;
  std::vector<uint32_t> set_begin_;  // set k is items_[set_begin_[k], set_begin_[k+1] or end)
  // Per closed set k: waiting_[waiting_begin_[k], waiting_begin_[k+1]) are the indices of its items
  // whose next symbol is a nonterminal (what a completion into set k reads).
  std::vector<uint32_t> waiting_;
  std::vector<uint32_t> waiting_begin_;
  // Membership of the set being built: open addressing keyed by the packed item, cleared by generation.
  std::vector<uint64_t> seen_keys_;
  std::vector<uint32_t> seen_gen_;
  uint32_t gen_ = 0;
  size_t seen_count_ = 0;
};

}  // namespace dsinfer::grammar
