// Token masks that do not depend on the stack, per Earley item, shared by every request of a compiled
// grammar (the xgrammar idea in Earley terms; src/grammar/README.md "Token masks").
//
// An Earley set is the union of what its kernel items (the items that started before it: scanned, or
// advanced by a completion) lead to, and an item's future depends on the input before it only where one
// of its productions that started before the set completes and looks into the set it started in. So
// per kernel item (production, dot) the cache walks the vocabulary trie once from that item alone, with
// the part of its origin set the item itself implies (the closure of predicting its left-hand side),
// and sorts every token into accepted whatever the context, rejected whatever the context, or uncertain:
// a token whose walk died where items of the unknown context could still have scanned its byte (the
// bytes that may follow a completed nonterminal in the grammar). Uncertain tokens are kept as the trie
// subtrees (their roots) that the request's matcher walks for real. A set's mask is then the union of
// its kernel items' accepted tokens and the real walk under their roots: bit for bit the full walk.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_matcher.h"

namespace dsinfer::grammar {

class MaskCache {
 public:
  // The grammar analysis the walks need (FIRST/FOLLOW byte sets per nonterminal, the bounded-repeat
  // chains whose positions share walks): linear in the grammar, done at compile time
  // (GrammarBuilder::build). `share_chains` false: every item is walked on its own (tests compare).
  explicit MaskCache(const Grammar& g, bool share_chains = true);

  // One kernel item's tokens.
  struct Entry {
    std::vector<uint32_t> words;  // accepted tokens as a bitmask, or empty when `ids` lists them
    std::vector<int32_t> ids;     // accepted tokens when fewer than the mask's words
    std::vector<uint32_t> roots;  // trie nodes (ascending) whose subtrees are uncertain
    size_t bytes() const { return (words.size() + ids.size() + roots.size()) * 4 + sizeof(Entry); }
    // ORs the accepted tokens into a mask.
    void apply(std::span<uint32_t> mask) const;
  };
  // The key of an item (production, dot), and of the start of the text (no context at all).
  static uint64_t item_key(uint32_t prod, uint32_t dot) { return (uint64_t{prod} << 32) | dot; }
  static constexpr uint64_t kStartKey = ~uint64_t{0};

  // The entry of `key` for this grammar over `vocab`: cached, or walked now (outside the lock). A
  // thread that needs an entry another thread is walking waits for that walk instead of walking it
  // again (16 streams of one schema meet a new item in the same step). Thread-safe.
  std::shared_ptr<const Entry> entry(const std::shared_ptr<const Grammar>& g,
                                     const std::shared_ptr<const Vocabulary>& vocab, uint64_t key);

  // Per (grammar, vocabulary), the entries' memory is bounded: past it, all are dropped and refilled.
  static constexpr size_t kMaxBytesPerVocabulary = size_t{8} << 20;
  struct Stats {
    size_t entries = 0, bytes = 0, walks = 0, hits = 0;
    size_t waits = 0;  // lookups that waited for another thread's walk of the same entry
    size_t shared = 0;   // entries that are another chain position's walk (counted in `entries`, not `walks`)
    size_t derived = 0;  // of `walks`: chain positions walked only where another position's walk differs
  };
  Stats stats() const;

 private:
  struct Occurrence {
    int32_t prod;
    uint32_t dot;
    ByteSet follow;  // what may follow the nonterminal here: FIRST of the rest, FOLLOW(lhs) if it can vanish
  };
  friend class KernelWalk;

  std::vector<std::vector<Occurrence>> occurrences_;  // per nonterminal: where productions use it

  // Bounded-repeat chains (`x{0,k}` lowers to N_1 -> e | x, N_a -> e | x N_(a-1)): the positions
  // (N_a -> x . N_(a-1)) of one chain share a walk while the walk stays clear of the chain's bottom
  // (src/grammar/README.md "Walk sharing in bounded repeats" has the argument).
  void find_chains(const Grammar& g);
  struct ChainStep {
    int32_t bottom = -1;  // the chain's N_1 (names the chain); -1: not a shareable position
    int32_t index = 0;    // a of N_a
    ByteSet follow;       // what the context may scan after N_a completes (all its occurrences' FOLLOW)
  };
  std::vector<ChainStep> chain_steps_;  // per production: set for each N_a -> x N_(a-1) of a shareable chain
  std::vector<int32_t> chain_index_;    // per nonterminal: a of N_a, 0 when in no chain
  std::vector<int32_t> chain_bottom_;   // per nonterminal: its chain's N_1, -1 when in none
  // A trie node where a chain position's walk first predicted chain member `low` on its path.
  struct ChainMark {
    uint32_t node;
    int32_t low;
  };
 public:
  // Marks are kept from this many members below the walked position: a position at least this far
  // (+3) from the chain's bottom is derived from another's walk (fewer tokens reach deeper).
  // (12: on the V4 vocabulary ~4K marks, 32 KiB, per chain; 8 would keep ~32K.)
  static constexpr int32_t kMinMarkDepth = 12;

 private:
  // A full walk of position N_i: its entry, the lowest member it predicted, and its marks. It stands
  // for position N_j of the same FOLLOW (shift d = j - i) where every member it predicted stays at or
  // above N_2 shifted (lowest + min(d, 0) >= 2); else, from kMinMarkDepth + 3 up, N_j's entry is this
  // one outside the subtrees of the topmost marks with low + min(d, 0) < 2, walked for N_j alone.
  struct SharedWalk {
    int32_t index;
    int32_t lowest;
    ByteSet follow;
    std::shared_ptr<const Entry> entry;
    std::shared_ptr<const std::vector<ChainMark>> marks;
  };
  static constexpr size_t kSharedEntryBytes = 64;  // what a key pointing to another's entry costs (about)

  struct PerVocabulary {
    std::shared_ptr<const Vocabulary> vocab;  // held so that the pointer key is never reused
    std::unordered_map<uint64_t, std::shared_ptr<const Entry>> entries;
    std::unordered_set<uint64_t> walking;  // keys a thread is walking now
    std::unordered_map<int32_t, std::vector<SharedWalk>> shared;  // per chain (its bottom)
    std::unordered_set<int32_t> walking_chains;  // chains (bottoms) one of whose positions a thread walks now
    size_t bytes = 0;
  };
  mutable std::mutex mu_;
  std::condition_variable walked_;  // a walk ended (stored, or failed)
  std::unordered_map<const Vocabulary*, PerVocabulary> by_vocab_;
  Stats stats_;
};

}  // namespace dsinfer::grammar
