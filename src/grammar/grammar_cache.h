// Compiled grammars shared between requests, keyed by what they were compiled from (kind + source text,
// hashed by the map), least recently used first out. Thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/grammar.h"

namespace dsinfer::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 256) : capacity_(capacity) {}

  // The grammar cached under `key`, or compile() it (outside the lock; errors propagate, nothing cached).
  std::shared_ptr<const Grammar> get(const std::string& key, const std::function<Grammar()>& compile);
  size_t size() const;
  size_t hits() const;

 private:
  size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;  // front: most recent
  struct Entry {
    std::shared_ptr<const Grammar> grammar;
    std::list<std::string>::iterator pos;
  };
  std::unordered_map<std::string, Entry> map_;
  size_t hits_ = 0;
};

}  // namespace dsinfer::grammar
