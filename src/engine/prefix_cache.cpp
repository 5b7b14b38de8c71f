#include "engine/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>

#include "core/error.h"

namespace dsinfer::engine {

uint64_t prefix_root_hash(const std::string& identity, const std::string& cache_layout) {
  const std::string seed = "dsinfer-prefix-v1\n" + identity + "\n" + cache_layout;
  return XXH3_64bits(seed.data(), seed.size());
}

uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens) {
  const uint64_t h = XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
  return h == 0 ? 1 : h;  // 0 means "no node"
}

PrefixCache::PrefixCache(uint64_t root, int32_t block_tokens, int64_t capacity_bytes)
    : root_(root), block_tokens_(block_tokens), capacity_(capacity_bytes) {
  DSINFER_CHECK(block_tokens > 0, "prefix cache: block_tokens must be positive");
}

void PrefixCache::touch(uint64_t hash, Node& n) {
  const bool in_lru = evictable(n);
  if (in_lru) lru_.erase({n.last_use, hash});
  n.last_use = ++clock_;
  if (in_lru) lru_.insert({n.last_use, hash});
}

PrefixCache::Match PrefixCache::match(std::span<const int32_t> tokens, int64_t max_blocks) {
  Match m;
  uint64_t parent = root_;
  const int64_t n_blocks = std::min<int64_t>(max_blocks, static_cast<int64_t>(tokens.size()) / block_tokens_);
  for (int64_t b = 0; b < n_blocks; ++b) {
    auto piece = tokens.subspan(b * block_tokens_, block_tokens_);
    const uint64_t h = chain_hash(parent, piece);
    auto it = nodes_.find(h);
    if (it == nodes_.end() || it->second.parent != parent ||
        !std::equal(piece.begin(), piece.end(), it->second.tokens.begin())) {
      break;
    }
    touch(h, it->second);
    m.nodes.push_back(h);
    m.blocks.push_back(it->second.block);
    m.snapshots.push_back(it->second.snapshot);
    parent = h;
  }
  return m;
}

void PrefixCache::acquire(uint64_t node) {
  auto it = nodes_.find(node);
  DSINFER_CHECK(it != nodes_.end(), "prefix cache: acquire of an unknown node");
  Node& n = it->second;
  if (evictable(n)) lru_.erase({n.last_use, node});
  if (n.refs++ == 0) {
    unreferenced_bytes_ -= n.block_bytes + n.snapshot_bytes;
    referenced_snapshot_bytes_ += n.snapshot_bytes;
  }
  n.last_use = ++clock_;
}

void PrefixCache::release(uint64_t node) {
  auto it = nodes_.find(node);
  DSINFER_CHECK(it != nodes_.end() && it->second.refs > 0, "prefix cache: release of an unreferenced node");
  Node& n = it->second;
  n.last_use = ++clock_;
  if (--n.refs == 0) {
    unreferenced_bytes_ += n.block_bytes + n.snapshot_bytes;
    referenced_snapshot_bytes_ -= n.snapshot_bytes;
    if (evictable(n)) lru_.insert({n.last_use, node});
  }
  enforce_capacity();
}

std::pair<uint64_t, bool> PrefixCache::insert(uint64_t parent, std::span<const int32_t> tokens,
                                              std::shared_ptr<const KvBlock> block, int64_t bytes) {
  DSINFER_CHECK(static_cast<int32_t>(tokens.size()) == block_tokens_, "prefix cache: a block holds ",
                block_tokens_, " tokens, got ", tokens.size());
  Node* parent_node = nullptr;
  if (parent != root_) {
    auto pit = nodes_.find(parent);
    if (pit == nodes_.end()) return {0, false};
    parent_node = &pit->second;
  }
  const uint64_t h = chain_hash(parent, tokens);
  if (auto it = nodes_.find(h); it != nodes_.end()) {
    if (it->second.parent != parent || !std::equal(tokens.begin(), tokens.end(), it->second.tokens.begin())) {
      return {0, false};  // a 64-bit collision: leave the resident block alone
    }
    acquire(h);
    return {h, false};
  }
  if (parent_node) {
    if (evictable(*parent_node)) lru_.erase({parent_node->last_use, parent});
    ++parent_node->children;
  }
  Node n;
  n.parent = parent;
  n.tokens.assign(tokens.begin(), tokens.end());
  n.block = std::move(block);
  n.block_bytes = bytes;
  n.refs = 1;
  n.last_use = ++clock_;
  nodes_.emplace(h, std::move(n));
  bytes_ += bytes;
  enforce_capacity();
  return {h, true};
}

bool PrefixCache::set_snapshot(uint64_t node, std::shared_ptr<const WindowSnapshot> snapshot, int64_t bytes) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.snapshot) return false;
  it->second.snapshot = std::move(snapshot);
  it->second.snapshot_bytes = bytes;
  bytes_ += bytes;
  ++snapshots_;
  if (it->second.refs == 0) {
    unreferenced_bytes_ += bytes;
  } else {
    referenced_snapshot_bytes_ += bytes;
  }
  enforce_capacity();
  return true;
}

bool PrefixCache::has_snapshot(uint64_t node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second.snapshot != nullptr;
}

std::shared_ptr<const KvBlock> PrefixCache::block(uint64_t node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : it->second.block;
}

int64_t PrefixCache::exclusive_bytes(std::span<const uint64_t> chain) const {
  int64_t bytes = 0;
  for (uint64_t h : chain) {
    auto it = nodes_.find(h);
    if (it != nodes_.end() && it->second.refs == 1) bytes += it->second.block_bytes + it->second.snapshot_bytes;
  }
  return bytes;
}

void PrefixCache::remove(uint64_t hash) {
  auto it = nodes_.find(hash);
  Node& n = it->second;
  lru_.erase({n.last_use, hash});
  const int64_t freed = n.block_bytes + n.snapshot_bytes;
  bytes_ -= freed;
  unreferenced_bytes_ -= freed;
  if (n.snapshot) --snapshots_;
  ++evicted_blocks_;
  const uint64_t parent = n.parent;
  nodes_.erase(it);
  if (parent != root_) {
    auto pit = nodes_.find(parent);
    if (pit != nodes_.end() && --pit->second.children == 0 && pit->second.refs == 0) {
      lru_.insert({pit->second.last_use, parent});
    }
  }
}

int64_t PrefixCache::evict(int64_t bytes) {
  int64_t freed = 0;
  while (freed < bytes && !lru_.empty()) {
    const uint64_t h = lru_.begin()->second;
    const Node& n = nodes_.at(h);
    freed += n.block_bytes + n.snapshot_bytes;
    remove(h);
  }
  if (freed >= bytes || referenced_snapshot_bytes_ == 0) return freed;
  // Then snapshots of nodes in use: a running sequence never needs them, only a future admission.
  std::vector<std::pair<uint64_t, uint64_t>> with_snapshot;
  for (const auto& [h, n] : nodes_) {
    if (n.snapshot && n.refs > 0) with_snapshot.push_back({n.last_use, h});
  }
  std::sort(with_snapshot.begin(), with_snapshot.end());
  for (const auto& [use, h] : with_snapshot) {
    if (freed >= bytes) break;
    Node& n = nodes_.at(h);
    freed += n.snapshot_bytes;
    bytes_ -= n.snapshot_bytes;
    referenced_snapshot_bytes_ -= n.snapshot_bytes;
    n.snapshot.reset();
    n.snapshot_bytes = 0;
    --snapshots_;
  }
  return freed;
}

void PrefixCache::enforce_capacity() {
  if (bytes_ > capacity_) evict(bytes_ - capacity_);
}


}  // namespace dsinfer::engine
