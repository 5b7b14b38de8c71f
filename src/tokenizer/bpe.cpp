#include "tokenizer/bpe.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace dsinfer::tokenizer {
namespace {

constexpr size_t kSmallWord = 128;      // merge_small's stack arrays
constexpr size_t kMaxCachedWord = 256;  // longer words are rare and not worth the cache space

std::atomic<uint64_t> next_instance{1};

}  // namespace

// Named, not anonymous: Bpe::Caches, a type with linkage, holds these (GCC's -Wsubobject-linkage in a
// unity build, where this file is an included one).
namespace bpe_caches {

// A per-thread cache of word -> ids for one model: open addressing over a power-of-two table, keys
// and ids in arenas. When it fills it is simply cleared (words repeat locally, so a cold restart
// costs little and keeps memory bounded).
class WordCache {
 public:
  static constexpr size_t kSlots = size_t{1} << 15;
  static constexpr size_t kMaxEntries = kSlots / 2;
  static constexpr size_t kMaxKeyBytes = size_t{4} << 20;

  void reset() {
    slots_.assign(kSlots, Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }

  // Appends the cached ids for `word` to `out`; false if absent.
  bool lookup(std::string_view word, uint64_t hash, std::vector<int32_t>& out) const {
    for (size_t i = hash & (kSlots - 1);; i = (i + 1) & (kSlots - 1)) {
      const Slot& s = slots_[i];
      if (s.key_len == 0) return false;
      if (s.hash == hash && s.key_len == word.size() && std::memcmp(keys_.data() + s.key_off, word.data(), word.size()) == 0) {
        out.insert(out.end(), ids_.begin() + s.ids_off, ids_.begin() + s.ids_off + s.ids_len);
        return true;
      }
    }
  }

  void insert(std::string_view word, uint64_t hash, const int32_t* ids, size_t n) {
    if (count_ >= kMaxEntries || keys_.size() + word.size() > kMaxKeyBytes) reset();
    size_t i = hash & (kSlots - 1);
    while (slots_[i].key_len != 0) i = (i + 1) & (kSlots - 1);
    slots_[i] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(word.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(word);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_off = 0;
    uint32_t key_len = 0;  // 0 = empty (cached words have at least 2 bytes)
    uint32_t ids_off = 0;
    uint32_t ids_len = 0;
  };
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

// Words of up to 24 bytes with up to 9 ids (nearly all words of prose and code) live in one 64-byte
// line each, found with a single cache miss; 4-way set associative, a full set overwrites a line.
class ShortWordCache {
 public:
  static constexpr size_t kMaxBytes = 24;
  static constexpr size_t kMaxIds = 9;
  static constexpr size_t kLines = size_t{1} << 15;  // 2 MiB

  void reset() { lines_.assign(kLines, Line{}); }

  struct Key {
    uint64_t w[3] = {0, 0, 0};
    uint64_t hash = 0;
    uint8_t len = 0;
  };
  static Key key_of(std::string_view word) {
    Key k;
    std::memcpy(k.w, word.data(), word.size());
    k.len = static_cast<uint8_t>(word.size());
    uint64_t h = (k.w[0] * 0x9E3779B97F4A7C15ull) ^ (k.w[1] * 0xC2B2AE3D27D4EB4Full) ^
                 (k.w[2] * 0x165667B19E3779F9ull) ^ (uint64_t{k.len} * 0x27D4EB2F165667C5ull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    k.hash = h ^ (h >> 32);
    return k;
  }

  bool lookup(const Key& k, std::vector<int32_t>& out) const {
    const Line* set = &lines_[(k.hash & (kLines - 1)) & ~size_t{3}];
    for (int way = 0; way < 4; ++way) {
      const Line& l = set[way];
      if (l.len == k.len && l.w[0] == k.w[0] && l.w[1] == k.w[1] && l.w[2] == k.w[2]) {
        out.insert(out.end(), l.ids, l.ids + l.n);
        return true;
      }
    }
    return false;
  }

  void insert(const Key& k, const int32_t* ids, size_t n) {
    Line* set = &lines_[(k.hash & (kLines - 1)) & ~size_t{3}];
    Line* target = &set[(k.hash >> 40) & 3];
    for (int way = 0; way < 4; ++way)
      if (set[way].len == 0) {
        target = &set[way];
        break;
      }
    std::memcpy(target->w, k.w, sizeof k.w);
    target->len = k.len;
    target->n = static_cast<uint8_t>(n);
    std::memcpy(target->ids, ids, n * sizeof(int32_t));
  }

 private:
  struct alignas(64) Line {
    uint64_t w[3] = {0, 0, 0};
    uint8_t len = 0;  // 0 = empty (cached words have at least 2 bytes)
    uint8_t n = 0;
    int32_t ids[kMaxIds] = {};
  };
  static_assert(sizeof(Line) == 64);
  std::vector<Line> lines_;
};

}  // namespace bpe_caches

struct Bpe::Caches {
  uint64_t owner = 0;
  uint64_t last_use = 0;
  bpe_caches::ShortWordCache short_words;
  bpe_caches::WordCache long_words;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    short_words.reset();
    long_words.reset();
  }
};

// Two sets of caches per thread, so alternating between two tokenizers (V4 and V4.1) does not thrash.
Bpe::Caches& Bpe::thread_caches() const {
  thread_local Caches caches[2];
  thread_local uint64_t clock = 0;
  ++clock;
  Caches* victim = &caches[0];
  for (auto& c : caches) {
    if (c.owner == instance_) {
      c.last_use = clock;
      return c;
    }
    if (c.last_use < victim->last_use) victim = &c;
  }
  victim->reset(instance_);
  victim->last_use = clock;
  return *victim;
}


size_t StringHash::operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }

Bpe::Bpe(const TokenMap& vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options options,
         std::string_view where)
    : vocab_(vocab), options_(options), instance_(next_instance.fetch_add(1)) {
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    const auto it = vocab.find(byte_level::encode(std::string_view(&byte, 1)));
    byte_ids_[b] = it == vocab.end() ? -1 : it->second;
  }
  size_t capacity = 1024;
  while (capacity < merges.size() * 2 + 16) capacity *= 2;
  slots_.assign(capacity, MergeSlot{kEmpty, 0, 0});
  mask_ = capacity - 1;
  shift_ = 64;
  for (size_t c = capacity; c > 1; c >>= 1) --shift_;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab.find(a);
    const auto ib = vocab.find(b);
    DSINFER_CHECK(ia != vocab.end() && ib != vocab.end(), where, ": merge ", rank, " \"", a, " ", b,
                  "\" uses a token that is not in the vocabulary");
    const auto im = vocab.find(a + b);
    DSINFER_CHECK(im != vocab.end(), where, ": merge ", rank, " \"", a, " ", b, "\" makes \"", a + b,
                  "\", which is not in the vocabulary");
    insert_merge(ia->second, ib->second, static_cast<int32_t>(rank), im->second);
  }
  merge_count_ = merges.size();
}

void Bpe::insert_merge(int32_t left, int32_t right, int32_t rank, int32_t merged) {
  const uint64_t key = (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  size_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  // A pair listed twice keeps its later rank, as Hugging Face's map built from the list does.
  slots_[i] = MergeSlot{key, rank, merged};
}

void Bpe::initial_symbols(std::string_view word, std::vector<int32_t>& sym) const {
  sym.clear();
  bool last_unk = false;
  for (unsigned char b : word) {
    const int32_t id = byte_ids_[b];
    if (id >= 0) {
      sym.push_back(id);
      last_unk = false;
    } else if (options_.unk_id >= 0 && !(options_.fuse_unk && last_unk)) {
      sym.push_back(options_.unk_id);
      last_unk = true;
    }
  }
}

void Bpe::merge_small(int32_t* sym, size_t n, std::vector<int32_t>& out) const {
  int32_t rank[kSmallWord];
  int32_t merged[kSmallWord];
  auto score = [&](size_t i) {
    const MergeSlot* m = find_merge(sym[i], sym[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    merged[i] = m ? m->merged : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) score(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == INT32_MAX) break;
    sym[best] = merged[best];
    // Drop symbol best+1 and pair best+1; pairs best-1 and best change.
    std::memmove(sym + best + 1, sym + best + 2, (n - best - 2) * sizeof(int32_t));
    if (best + 2 < n) {
      std::memmove(rank + best + 1, rank + best + 2, (n - best - 3) * sizeof(int32_t));
      std::memmove(merged + best + 1, merged + best + 2, (n - best - 3) * sizeof(int32_t));
    }
    --n;
    if (best > 0) score(best - 1);
    if (best + 1 < n) score(best);
  }
  out.insert(out.end(), sym, sym + n);
}

void Bpe::merge_large(const int32_t* initial, size_t n, std::vector<int32_t>& out) const {
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<int32_t> sym(initial, initial + n);
  std::vector<int32_t> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>{}, std::move(storage));
  auto push = [&](int32_t i) {
    if (i < 0 || next[i] < 0) return;
    if (const MergeSlot* m = find_merge(sym[i], sym[next[i]])) heap.push({m->rank, i, m->merged});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    const int32_t i = top.pos;
    if (!alive[i] || next[i] < 0) continue;
    const int32_t j = next[i];
    const MergeSlot* m = find_merge(sym[i], sym[j]);
    if (!m || m->merged != top.merged || m->rank != top.rank) continue;  // stale entry
    sym[i] = top.merged;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out.push_back(sym[i]);
}

void Bpe::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    const auto it = vocab_.find(byte_level::encode(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local std::vector<int32_t> sym;
  initial_symbols(word, sym);
  if (sym.empty()) return;
  if (sym.size() <= kSmallWord) {
    merge_small(sym.data(), sym.size(), out);
  } else {
    merge_large(sym.data(), sym.size(), out);
  }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out, Caches& caches) const {
  if (word.size() == 1) {
    const int32_t id = byte_ids_[static_cast<unsigned char>(word[0])];
    if (id >= 0) out.push_back(id);
    else if (options_.unk_id >= 0) out.push_back(options_.unk_id);
    return;
  }
  if (word.size() > kMaxCachedWord) {
    encode_word_uncached(word, out);
    return;
  }
  const size_t start = out.size();
  if (word.size() <= bpe_caches::ShortWordCache::kMaxBytes) {
    const bpe_caches::ShortWordCache::Key key = bpe_caches::ShortWordCache::key_of(word);
    if (caches.short_words.lookup(key, out)) return;
    encode_word_uncached(word, out);
    if (out.size() - start <= bpe_caches::ShortWordCache::kMaxIds) {
      caches.short_words.insert(key, out.data() + start, out.size() - start);
    } else {  // too many ids for a line
      caches.long_words.insert(word, XXH3_64bits(word.data(), word.size()), out.data() + start, out.size() - start);
    }
    return;
  }
  const uint64_t hash = XXH3_64bits(word.data(), word.size());
  if (caches.long_words.lookup(word, hash, out)) return;
  encode_word_uncached(word, out);
  caches.long_words.insert(word, hash, out.data() + start, out.size() - start);
}

}  // namespace dsinfer::tokenizer
