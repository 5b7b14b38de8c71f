#include "server/responses_store.h"

namespace dsinfer::server {

ResponsesStore::ResponsesStore(std::chrono::milliseconds ttl, int64_t max_bytes, Now now)
    : ttl_(ttl), max_bytes_(max_bytes), now_(std::move(now)) {}

void ResponsesStore::drop(Map::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  by_age_.erase(it->second.age);
  entries_.erase(it);
}

void ResponsesStore::expire(Clock::time_point now) {
  while (!by_age_.empty()) {
    auto it = entries_.find(by_age_.front());
    if (it->second.expires > now) return;
    drop(it);
  }
}

bool ResponsesStore::put(const std::string& id, Stored stored) {
  const int64_t size =
      static_cast<int64_t>(id.size() + stored.conversation.size() + stored.response.size());
  std::lock_guard lock(mu_);
  const Clock::time_point now = now_();
  expire(now);
  if (auto it = entries_.find(id); it != entries_.end()) drop(it);
  if (size > max_bytes_) return false;
  while (bytes_ + size > max_bytes_) drop(entries_.find(lru_.front()));
  lru_.push_back(id);
  by_age_.push_back(id);
  entries_.emplace(id, Entry{std::move(stored), size, now + ttl_, std::prev(lru_.end()), std::prev(by_age_.end())});
  bytes_ += size;
  return true;
}

std::optional<ResponsesStore::Stored> ResponsesStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  expire(now_());
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  lru_.splice(lru_.end(), lru_, it->second.lru);
  return it->second.stored;
}

bool ResponsesStore::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  expire(now_());
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  drop(it);
  return true;
}

int64_t ResponsesStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

size_t ResponsesStore::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

}  // namespace dsinfer::server
