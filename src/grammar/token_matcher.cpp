#include "grammar/token_matcher.h"

#include <algorithm>

#include "core/error.h"
#include "grammar/mask_cache.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::grammar {

Vocabulary::Vocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids,
                       const std::vector<int32_t>& excluded)
    : size_(static_cast<int32_t>(token_bytes.size())), eos_ids_(std::move(eos_ids)), bytes_(token_bytes) {
  in_trie_.assign(size_, 0);
  for (int32_t id = 0; id < size_; ++id) in_trie_[id] = !bytes_[id].empty();
  for (int32_t id : excluded) {
    if (id >= 0 && id < size_) in_trie_[id] = 0;
  }
  for (int32_t id : eos_ids_) {
    DSINFER_CHECK(id >= 0 && id < size_, "end-of-text id ", id, " outside the vocabulary of ", size_);
    in_trie_[id] = 0;
  }
  // Preorder trie from the sorted spellings: each spelling shares its longest common prefix with the one
  // before, so only the nodes past that prefix are new.
  std::vector<int32_t> order;
  for (int32_t id = 0; id < size_; ++id) {
    if (in_trie_[id]) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[a] != bytes_[b] ? bytes_[a] < bytes_[b] : a < b;
  });
  std::vector<uint32_t> path;  // node index per depth of the previous spelling
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = bytes_[id];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    }
    DSINFER_CHECK(s.size() < 65536, "token ", id, " longer than 65535 bytes");
    for (size_t d = common; d < path.size(); ++d) nodes_[path[d]].end = static_cast<uint32_t>(nodes_.size());
    path.resize(common);
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      uint32_t at = static_cast<uint32_t>(ids_.size());
      nodes_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint16_t>(d + 1), 0, at, at});
    }
    ids_.push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    // A spelling's ids follow its node's creation at once (a prefix sorts first), duplicates included.
    nodes_[path.back()].ids_end = static_cast<uint32_t>(ids_.size());
    prev = &s;
  }
  for (uint32_t n : path) nodes_[n].end = static_cast<uint32_t>(nodes_.size());
}

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const tokenizer::Tokenizer& tok,
                                                             std::vector<int32_t> eos_ids,
                                                             const std::vector<std::string>& kept_added) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.is_known(id)) bytes[id] = std::string(tok.token_bytes(id));
  }
  std::vector<int32_t> excluded;
  for (const auto& t : tok.added_tokens()) {
    if (std::find(kept_added.begin(), kept_added.end(), t.content) == kept_added.end()) {
      excluded.push_back(t.id);
    } else if (t.id >= 0 && t.id < tok.vocab_size()) {
      bytes[t.id] = t.content;
    }
  }
  return std::make_shared<const Vocabulary>(bytes, std::move(eos_ids), excluded);
}

TokenMatcher::TokenMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const Vocabulary> vocab)
    : grammar_(grammar), vocab_(std::move(vocab)), matcher_(std::move(grammar)) {}

bool TokenMatcher::is_eos(int32_t id) const {
  const auto& e = vocab_->eos_ids();
  return std::find(e.begin(), e.end(), id) != e.end();
}

// Canonical content of the matcher's last set: its items that still wait for something (completed ones
// never act again), sorted, each origin written as an absolute position when it lies in the committed
// input (at or before `base`), as the interned state of the walk's set there when it lies inside the
// walk, or as "here". Equal content means equal futures: completion reads only the origin sets.
uint32_t TokenMatcher::intern_last_set(size_t base, const std::vector<uint32_t>& path_state) {
  const size_t here = matcher_.bytes_accepted();
  struct Key {
    uint32_t prod, dot, tag, origin;
    bool operator<(const Key& o) const {
      return prod != o.prod ? prod < o.prod : dot != o.dot ? dot < o.dot : tag != o.tag ? tag < o.tag : origin < o.origin;
    }
  };
  std::vector<Key> keys;
  key_max_origin_ = 0;
  for (const EarleyMatcher::Item& it : matcher_.last_set()) {
    if (matcher_.next_symbol(it) == EarleyMatcher::kNone) continue;
    if (it.origin == here) {
      keys.push_back({it.prod, it.dot, 2, 0});
    } else if (it.origin <= base) {
      keys.push_back({it.prod, it.dot, 0, it.origin});
      key_max_origin_ = std::max<size_t>(key_max_origin_, it.origin);
    } else {
      keys.push_back({it.prod, it.dot, 1, path_state[it.origin - base]});
    }
  }
  std::sort(keys.begin(), keys.end());
  key_.assign(reinterpret_cast<const char*>(keys.data()), keys.size() * sizeof(Key));
  auto [pos, inserted] = states_.emplace(key_, static_cast<uint32_t>(states_.size()));
  return pos->second;
}

void TokenMatcher::fill_mask(std::span<uint32_t> words) {
  DSINFER_CHECK_INTERNAL(words.size() * 32 >= static_cast<size_t>(vocab_->size()), "token mask too small");
  std::fill(words.begin(), words.end(), 0u);
  auto allow = [&](int32_t id) { words[id >> 5] |= 1u << (id & 31); };
  bool any = false;
  if (!terminated()) {
    const size_t base = matcher_.bytes_accepted();
    states_.clear();
    transitions_.clear();
    std::vector<uint32_t> path_state{intern_last_set(base, {})};  // per walk depth: its interned state
    // The same canonical state as at an earlier step (inside a long string, every step): same tokens.
    auto hit = masks_.find(key_);
    if (hit != masks_.end()) {
      std::copy(hit->second.words.begin(), hit->second.words.end(), words.begin());
      any = hit->second.any;
    } else {
      std::string root_key = key_;
      const size_t root_max_origin = key_max_origin_;
      if (grammar_->mask_cache) {
        fill_from_cache(words, base, path_state, any);
      } else {
        walk(words, base, path_state, any);
      }
      if (masks_.size() >= kMaxCachedMasks) masks_.clear();
      masks_.emplace(std::move(root_key),
                     CachedMask{std::vector<uint32_t>(words.begin(), words.end()), any, root_max_origin});
    }
  }
  if (terminated() || matcher_.is_complete() || !any) {
    for (int32_t id : vocab_->eos_ids()) allow(id);
  }
}

void TokenMatcher::fill_from_cache(std::span<uint32_t> words, size_t base, std::vector<uint32_t>& path_state,
                                   bool& any) {
  // The kernel items: those that started before this set (at the start of the text, none: the start
  // entry). Completed ones never act again.
  kernel_keys_.clear();
  if (base == 0) {
    kernel_keys_.push_back(MaskCache::kStartKey);
  } else {
    for (const EarleyMatcher::Item& it : matcher_.last_set()) {
      if (it.origin < base && matcher_.next_symbol(it) != EarleyMatcher::kNone) {
        kernel_keys_.push_back(MaskCache::item_key(it.prod, it.dot));
      }
    }
    std::sort(kernel_keys_.begin(), kernel_keys_.end());
    kernel_keys_.erase(std::unique(kernel_keys_.begin(), kernel_keys_.end()), kernel_keys_.end());
  }
  roots_.clear();
  for (uint64_t key : kernel_keys_) {
    auto entry = grammar_->mask_cache->entry(grammar_, vocab_, key);
    entry->apply(words);
    roots_.insert(roots_.end(), entry->roots.begin(), entry->roots.end());
  }
  if (!roots_.empty()) {
    std::sort(roots_.begin(), roots_.end());
    roots_.erase(std::unique(roots_.begin(), roots_.end()), roots_.end());
    walk(words, base, path_state, any, &roots_);
  }
  any = std::any_of(words.begin(), words.end(), [](uint32_t w) { return w != 0; });
}

void TokenMatcher::walk(std::span<uint32_t> words, size_t base, std::vector<uint32_t>& path_state, bool& any,
                        const std::vector<uint32_t>* roots) {
  auto allow = [&](int32_t id) { words[id >> 5] |= 1u << (id & 31); };
  const auto& nodes = vocab_->nodes();
  const auto& ids = vocab_->ids();
  std::vector<uint8_t> path;  // the bytes of the walk's path
  size_t real = 0;            // path bytes actually pushed on the matcher (a prefix of the path)
  size_t next_root = 0;       // with roots: the first one not passed yet
  uint32_t inside_end = 0;    // with roots: the end of the root subtree being walked
  {
    ByteSet first = matcher_.allowed_bytes();
    for (uint32_t i = 0; i < nodes.size();) {
      const Vocabulary::Node& n = nodes[i];
      if (roots != nullptr && i >= inside_end) {  // outside the subtrees to walk: only the paths to them
        while (next_root < roots->size() && (*roots)[next_root] < i) ++next_root;
        if (next_root == roots->size()) break;
        if ((*roots)[next_root] == i) {
          inside_end = n.end;
        } else if ((*roots)[next_root] >= n.end) {
          i = n.end;
          continue;
        }
      }
      if (n.depth == 1 && !first.has(n.byte)) {  // most first bytes die here
        i = n.end;
        continue;
      }
      const size_t parent_depth = n.depth - 1u;
      path.resize(parent_depth);
      path_state.resize(parent_depth + 1);
      if (real > parent_depth) {  // the matcher must stay on a prefix of the path
        matcher_.rollback(real - parent_depth);
        real = parent_depth;
      }
      const uint64_t key = (uint64_t{path_state[parent_depth]} << 8) | n.byte;
      auto t = transitions_.find(key);
      int32_t next;
      if (t != transitions_.end()) {
        next = t->second;
      } else {
        // Bring the matcher to the parent (replaying cached steps), then take one real Earley step.
        for (; real < parent_depth; ++real) {
          const bool ok = matcher_.accept_byte(path[real]);
          DSINFER_CHECK_INTERNAL(ok, "grammar walk: a cached transition did not replay");
        }
        if (matcher_.accept_byte(n.byte)) {
          ++real;
          next = static_cast<int32_t>(intern_last_set(base, path_state));
        } else {
          next = -1;
        }
        transitions_.emplace(key, next);
      }
      if (next < 0) {
        i = n.end;
        continue;
      }
      path.push_back(n.byte);
      path_state.push_back(static_cast<uint32_t>(next));
      for (uint32_t k = n.ids_begin; k < n.ids_end; ++k) allow(ids[k]);
      any = any || n.ids_end > n.ids_begin;
      ++i;
    }
    matcher_.rollback(real);
  }
}

bool TokenMatcher::accept_token(int32_t id) {
  if (id < 0 || id >= vocab_->size()) return false;
  if (terminated()) {  // only end of text again (a request that ignores it keeps drawing it)
    if (!is_eos(id)) return false;
    token_bytes_.push_back(0);
    return true;
  }
  if (is_eos(id)) {
    if (!matcher_.is_complete()) return false;
    terminated_at_ = tokens_accepted();
    token_bytes_.push_back(0);
    return true;
  }
  if (!vocab_->in_trie(id)) return false;
  const std::string& b = vocab_->bytes_of(id);
  if (!matcher_.accept_bytes(b)) return false;
  token_bytes_.push_back(static_cast<uint32_t>(b.size()));
  return true;
}

void TokenMatcher::rollback(int32_t n) {
  DSINFER_CHECK_INTERNAL(n >= 0 && n <= tokens_accepted(), "grammar rollback of ", n, " tokens");
  size_t bytes = 0;
  for (int32_t k = 0; k < n; ++k) {
    bytes += token_bytes_.back();
    token_bytes_.pop_back();
  }
  if (terminated_at_ >= tokens_accepted()) terminated_at_ = -1;
  matcher_.rollback(bytes);
  // Masks stay valid while every position their state refers to is still in the input unchanged.
  const size_t length = matcher_.bytes_accepted();
  std::erase_if(masks_, [&](const auto& entry) { return entry.second.max_origin > length; });
}

}  // namespace dsinfer::grammar
