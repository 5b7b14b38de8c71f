// The Responses API's stored responses (`store`, `previous_response_id`, GET/DELETE /v1/responses/{id}):
// each finished response kept in memory with its conversation, for a fixed time after it was made and
// within a byte cap, the least recently used dropped first. Thread-safe: the io and prep threads share it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace dsinfer::server {

class ResponsesStore {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;  // injectable for tests

  struct Stored {
    std::string conversation;  // JSON array: the response's input items, then its output items
    std::string response;      // the response object as the client got it
  };

  // max_bytes 0 stores nothing. An entry's size counts its id and both JSON texts.
  ResponsesStore(std::chrono::milliseconds ttl, int64_t max_bytes, Now now = Clock::now);

  // Keeps a response (replacing one of the same id); false when it alone is larger than the cap.
  bool put(const std::string& id, Stored stored);
  // A response not expired, which becomes the most recently used; nullopt when unknown or expired.
  std::optional<Stored> get(const std::string& id);
  // Removes a response; false when it was unknown or expired.
  bool erase(const std::string& id);

  int64_t bytes() const;
  size_t size() const;

 private:
  struct Entry {
    Stored stored;
    int64_t bytes = 0;
    Clock::time_point expires;
    std::list<std::string>::iterator lru;  // position in lru_
    std::list<std::string>::iterator age;  // position in by_age_
  };
  using Map = std::unordered_map<std::string, Entry>;

  void drop(Map::iterator it);
  void expire(Clock::time_point now);

  const std::chrono::milliseconds ttl_;
  const int64_t max_bytes_;
  const Now now_;
  mutable std::mutex mu_;
  Map entries_;
  std::list<std::string> lru_;     // least recently used first
  std::list<std::string> by_age_;  // oldest first: with one TTL for all, also the order they expire in
  int64_t bytes_ = 0;
};

}  // namespace dsinfer::server
