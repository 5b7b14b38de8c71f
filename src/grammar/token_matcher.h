// Grammar-constrained decoding over a token vocabulary: a token trie built once per vocabulary, and a
// per-request TokenMatcher that fills the allowed-token bitmask for the next position (walking the trie
// with the Earley matcher, pruning a subtree at its first rejected byte), accepts tokens and rolls
// them back (speculation, preemption replay).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/earley_matcher.h"
#include "grammar/grammar.h"

namespace dsinfer::tokenizer {
class Tokenizer;
}

namespace dsinfer::grammar {

// The bytes of every token id, as a trie in preorder, and the end-of-text ids.
class Vocabulary {
 public:
  // token_bytes[id]: the bytes the id decodes to; ids in `excluded` (special and control tokens, which
  // a grammar never produces) and ids with no bytes are left out of the trie.
  Vocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids,
             const std::vector<int32_t>& excluded = {});
  // Every known id's bytes; added tokens are excluded (the constraint emits text, never markers) but
  // for those whose content is in `kept_added` (spelled by their content: the DSML marker and </think>
  // of a tool-call grammar, which the recipe's parser reads as text).
  static std::shared_ptr<const Vocabulary> from_tokenizer(const tokenizer::Tokenizer& tok,
                                                          std::vector<int32_t> eos_ids,
                                                          const std::vector<std::string>& kept_added = {});

  int32_t size() const { return size_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  const std::string& bytes_of(int32_t id) const { return bytes_[id]; }
  bool in_trie(int32_t id) const { return in_trie_[id]; }

  struct Node {
    uint8_t byte;
    uint16_t depth;       // 1 for a first byte
    uint32_t end;         // index just past this node's subtree
    uint32_t ids_begin, ids_end;  // into ids(): the tokens spelled by the path to this node
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  size_t max_depth() const { return max_depth_; }  // the longest token's bytes
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  int32_t size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::string> bytes_;
  std::vector<char> in_trie_;
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  size_t max_depth_ = 0;
};

// Bit i of word i/32 set = token i allowed.
using TokenMask = std::vector<uint32_t>;
inline bool mask_allows(std::span<const uint32_t> mask, int32_t id) { return (mask[id >> 5] >> (id & 31)) & 1; }

class TokenMatcher {
 public:
  TokenMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab);

  // Fills words ((vocab size + 31) / 32 of them) with the tokens allowed next. Never all zero: when the
  // grammar is complete every end-of-text id is allowed, and after end of text (or should the grammar
  // offer nothing, which a checked grammar cannot) only end-of-text ids.
  void fill_mask(std::span<uint32_t> words);
  // Accepts the token if allowed (end-of-text only when the grammar is complete; after it, only
  // end-of-text again); false changes nothing.
  bool accept_token(int32_t id);
  // Undoes the last n accepted tokens.
  void rollback(int32_t n);
  int32_t tokens_accepted() const { return static_cast<int32_t>(token_bytes_.size()); }
  bool is_complete() const { return matcher_.is_complete(); }
  bool terminated() const { return terminated_at_ >= 0; }
  // Tokens accepted before end of text (all of them while not terminated).
  int32_t tokens_before_end() const { return terminated() ? terminated_at_ : tokens_accepted(); }
  bool is_eos(int32_t id) const;
  const Vocabulary& vocabulary() const { return *vocab_; }

 private:
  uint32_t intern_last_set(size_t base, const std::vector<uint32_t>& path_state);
  // Walks the trie from the current set; with `roots` (ascending trie nodes) only their subtrees (and
  // the paths to them).
  void walk(std::span<uint32_t> words, size_t base, std::vector<uint32_t>& path_state, bool& any,
            const std::vector<uint32_t>* roots = nullptr);
  // The union of the kernel items' cached tokens (grammar's MaskCache) and the real walk under their
  // uncertain roots: the same mask as walk().
  void fill_from_cache(std::span<uint32_t> words, size_t base, std::vector<uint32_t>& path_state, bool& any);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  EarleyMatcher matcher_;
  std::vector<uint64_t> kernel_keys_;
  std::vector<uint32_t> roots_;
  // fill_mask's walk as a lazily built automaton: Earley sets reached during the walk are interned by
  // their canonical content, and (state, byte) transitions cached, so most trie nodes cost one lookup
  // instead of an Earley step (inside a JSON string nearly every token leads to the same state).
  std::unordered_map<std::string, uint32_t> states_;
  std::unordered_map<uint64_t, int32_t> transitions_;  // (state << 8 | byte) -> state, or -1: rejected
  std::string key_;
  size_t key_max_origin_ = 0;  // the largest committed position key_ names
  // Walk results by the canonical state at the step's start (end of text added per step).
  struct CachedMask {
    std::vector<uint32_t> words;
    bool any;
    size_t max_origin;
  };
  static constexpr size_t kMaxCachedMasks = 32;
  std::unordered_map<std::string, CachedMask> masks_;
  std::vector<uint32_t> token_bytes_;  // per accepted token: bytes it added (0 for end of text)
  int32_t terminated_at_ = -1;         // token index of the accepted end of text
};

}  // namespace dsinfer::grammar
