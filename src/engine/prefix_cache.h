// In-memory prefix cache of compressed-KV blocks. A block is named by a chained hash over full blocks of
// tokens (hash_i = XXH3(tokens of block i, seed = hash_{i-1}); hash_{-1} from the model identity and
// cache layout), so a name fixes the whole prefix before it. Nodes form a tree; a node may also carry
// the window snapshot at its end position, which allows exact resume there. Running sequences hold
// references; only unreferenced leaves are evicted, least recently used first.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/model_runner.h"

namespace dsinfer::engine {

uint64_t prefix_root_hash(const std::string& identity, const std::string& cache_layout);
uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens);

class PrefixCache {
 public:
  PrefixCache(uint64_t root, int32_t block_tokens, int64_t capacity_bytes);

  uint64_t root() const { return root_; }
  int32_t block_tokens() const { return block_tokens_; }

  struct Match {
    std::vector<uint64_t> nodes;                    // consecutive blocks from position 0
    std::vector<std::shared_ptr<const KvBlock>> blocks;
    std::vector<std::shared_ptr<const WindowSnapshot>> snapshots;  // per node: the one at its end, or null
  };
  // Longest cached prefix of `tokens` in full blocks, at most max_blocks; counts as a use (LRU).
  Match match(std::span<const int32_t> tokens, int64_t max_blocks);

  void acquire(uint64_t node);
  void release(uint64_t node);

  // Adds block `tokens` under `parent` (root() for the first block). Returns the node's hash and whether
  // this call inserted it (false: an identical block was cached already, or the parent is gone; then
  // the returned hash is 0 when the parent is gone). The new node is acquired for the caller.
  std::pair<uint64_t, bool> insert(uint64_t parent, std::span<const int32_t> tokens,
                                   std::shared_ptr<const KvBlock> block, int64_t bytes);
  // Attaches a snapshot to a node that has none; returns whether it was stored.
  bool set_snapshot(uint64_t node, std::shared_ptr<const WindowSnapshot> snapshot, int64_t bytes);
  bool has_snapshot(uint64_t node) const;
  std::shared_ptr<const KvBlock> block(uint64_t node) const;
  // Bytes of the nodes in `chain` that only one holder references: what releasing that chain frees.
  int64_t exclusive_bytes(std::span<const uint64_t> chain) const;
  bool contains(uint64_t node) const { return nodes_.count(node) != 0; }

  // Evicts unreferenced leaves (LRU), then snapshots of referenced nodes (LRU), until `bytes` are freed
  // or nothing evictable is left; returns bytes freed.
  int64_t evict(int64_t bytes);
  // Bytes that eviction could free now. Every holder references its whole chain from the root, so the
  // unreferenced nodes form whole subtrees and all of them can be evicted leaf by leaf; snapshots of
  // referenced nodes can be dropped too (eviction takes them last).
  int64_t evictable_bytes() const { return unreferenced_bytes_ + referenced_snapshot_bytes_; }

  int64_t bytes() const { return bytes_; }
  int64_t nodes() const { return static_cast<int64_t>(nodes_.size()); }
  int64_t snapshots() const { return snapshots_; }
  int64_t evicted_blocks_total() const { return evicted_blocks_; }

 private:
  struct Node {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    std::shared_ptr<const KvBlock> block;
    std::shared_ptr<const WindowSnapshot> snapshot;
    int64_t block_bytes = 0, snapshot_bytes = 0;
    int64_t refs = 0, children = 0;
    uint64_t last_use = 0;
  };
  bool evictable(const Node& n) const { return n.refs == 0 && n.children == 0; }
  void touch(uint64_t hash, Node& n);
  void remove(uint64_t hash);
  void enforce_capacity();

  uint64_t root_;
  int32_t block_tokens_;
  int64_t capacity_;
  std::unordered_map<uint64_t, Node> nodes_;
  std::set<std::pair<uint64_t, uint64_t>> lru_;  // (last_use, hash) of evictable leaves
  uint64_t clock_ = 0;
  int64_t bytes_ = 0, snapshots_ = 0, evicted_blocks_ = 0;
  int64_t unreferenced_bytes_ = 0, referenced_snapshot_bytes_ = 0;
};

}  // namespace dsinfer::engine
