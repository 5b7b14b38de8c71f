// The BPE model of a byte-level tokenizer.json: merge ranks in an open-addressing hash map keyed by
// the pair of token ids, a per-thread word cache, and the merge loop (lowest rank first, leftmost
// first among equal ranks, as Hugging Face's). Words are raw bytes; each byte starts as the id of
// its ByteLevel character.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsinfer::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  struct Options {
    bool ignore_merges = false;  // a word that is itself in the vocabulary becomes that token
    int32_t unk_id = -1;         // for bytes without a vocabulary entry; dropped when -1
    bool fuse_unk = false;
  };

  // `vocab` maps token spellings (ByteLevel alphabet) to ids and must outlive the model. `merges`
  // are (left, right) spellings, best first. Throws core::Error naming `where` for a merge whose
  // parts or result are not in the vocabulary.
  Bpe(const TokenMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options,
      std::string_view where);

  // The calling thread's word caches for this model (fetch once per text, not per word).
  struct Caches;
  Caches& thread_caches() const;

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out, Caches& caches) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const { encode_word(word, out, thread_caches()); }

  // The same without the word cache (the reference the cache is tested against).
  void encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const;

  size_t merge_count() const { return merge_count_; }

 private:
  struct MergeSlot {
    uint64_t key;  // left << 32 | right; kEmpty if unused
    int32_t rank;
    int32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  void insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged);
  const MergeSlot* find_merge(int32_t left, int32_t right) const {
    const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    size_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
    for (;;) {
      const MergeSlot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  void merge_small(int32_t* sym, size_t n, std::vector<int32_t>& out) const;
  void merge_large(const int32_t* sym, size_t n, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view word, std::vector<int32_t>& sym) const;

  const TokenMap& vocab_;
  Options options_;
  std::array<int32_t, 256> byte_ids_{};
  std::vector<MergeSlot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t merge_count_ = 0;
  uint64_t instance_ = 0;  // keys the per-thread word caches
};

}  // namespace dsinfer::tokenizer
