// The SWA pool: window snapshots kept in host RAM for minutes, keyed by the chained block hash of the
// block-aligned position they were taken at, so the next turn of a session resumes exactly there
// instead of replaying the window. Snapshots are never persisted (README.md). Bounded by a TTL from
// the last use (default 180 s) and a byte cap (least recently used evicted first). Thread-safe.
// A template over the snapshot type so this part needs nothing from the engine.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvstore/clock.h"
#include "kvstore/stats.h"

namespace dsinfer::kvstore {

struct SwaPoolOptions {
  int64_t ttl_ns = 180 * kNsPerSecond;
  int64_t capacity_bytes = int64_t{1} << 30;
  Clock clock;  // default: the system clock
};

template <typename Snapshot>
class SwaPool {
 public:
  explicit SwaPool(SwaPoolOptions options) : options_(std::move(options)) {
    if (!options_.clock) options_.clock = system_clock();
  }

  // Stores (or replaces) the snapshot at `key`; false when it alone exceeds the cap.
  bool put(uint64_t key, std::shared_ptr<const Snapshot> snapshot, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = options_.clock();
    erase_locked(key);
    if (bytes > options_.capacity_bytes) {
      publish_size_locked();
      return false;
    }
    expire_locked(now);
    while (bytes_ + bytes > options_.capacity_bytes && !lru_.empty()) {
      erase_locked(lru_.back());
      stats_.evictions.fetch_add(1, std::memory_order_relaxed);
    }
    lru_.push_front(key);
    entries_.emplace(key, Entry{std::move(snapshot), bytes, now, lru_.begin()});
    bytes_ += bytes;
    publish_size_locked();
    return true;
  }

  // The snapshot at `key`, or null when absent or expired; a hit restarts its TTL.
  std::shared_ptr<const Snapshot> get(uint64_t key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const int64_t now = options_.clock();
    auto it = entries_.find(key);
    if (it != entries_.end() && expired(it->second, now)) {
      erase_locked(key);
      stats_.expiries.fetch_add(1, std::memory_order_relaxed);
      publish_size_locked();
      it = entries_.end();
    }
    if (it == entries_.end()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    it->second.last_use_ns = now;
    lru_.splice(lru_.begin(), lru_, it->second.position);
    stats_.hits.fetch_add(1, std::memory_order_relaxed);
    return it->second.snapshot;
  }

  // Drops every expired entry now (otherwise they go when touched or when room is needed); returns how many.
  int64_t expire() {
    std::lock_guard<std::mutex> lock(mutex_);
    return expire_locked(options_.clock());
  }

  int64_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return bytes_;
  }
  int64_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(entries_.size());
  }
  const SwaPoolStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::shared_ptr<const Snapshot> snapshot;
    int64_t bytes;
    int64_t last_use_ns;
    std::list<uint64_t>::iterator position;
  };

  bool expired(const Entry& e, int64_t now) const { return now - e.last_use_ns > options_.ttl_ns; }

  void erase_locked(uint64_t key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    bytes_ -= it->second.bytes;
    lru_.erase(it->second.position);
    entries_.erase(it);
  }

  // The least recently used entries expire first, so the scan stops at the first live one.
  int64_t expire_locked(int64_t now) {
    int64_t n = 0;
    while (!lru_.empty() && expired(entries_.at(lru_.back()), now)) {
      erase_locked(lru_.back());
      ++n;
    }
    stats_.expiries.fetch_add(n, std::memory_order_relaxed);
    publish_size_locked();
    return n;
  }

  void publish_size_locked() {
    stats_.entries.store(static_cast<int64_t>(entries_.size()), std::memory_order_relaxed);
    stats_.bytes.store(bytes_, std::memory_order_relaxed);
  }

  SwaPoolOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // most recently used first
  int64_t bytes_ = 0;
  SwaPoolStats stats_;
};

}  // namespace dsinfer::kvstore
