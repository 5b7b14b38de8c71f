#include "grammar/grammar_cache.h"

namespace dsinfer::grammar {

std::shared_ptr<const Grammar> GrammarCache::get(const std::string& key, const std::function<Grammar()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.pos);
      ++hits_;
      return it->second.grammar;
    }
  }
  auto grammar = std::make_shared<const Grammar>(compile());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end()) return it->second.grammar;  // another thread compiled it meanwhile
  lru_.push_front(key);
  map_.emplace(key, Entry{grammar, lru_.begin()});
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  return grammar;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return map_.size();
}

size_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

}  // namespace dsinfer::grammar
