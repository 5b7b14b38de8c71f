#include "router/prefill_balancer.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace dsinfer::router {

std::vector<int64_t> parse_bucket_bounds(const std::string& text) {
  std::vector<int64_t> bounds;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t digits = 0;
    while (digits < item.size() && std::isdigit(static_cast<unsigned char>(item[digits]))) ++digits;
    DSINFER_CHECK(digits > 0 && digits <= 12, "bucket bounds \"", text, "\": \"", item, "\" is not a size");
    int64_t value = std::stoll(item.substr(0, digits));
    const std::string unit = item.substr(digits);
    if (unit == "K" || unit == "k") {
      value *= 1024;
    } else if (unit == "M" || unit == "m") {
      value *= 1024 * 1024;
    } else {
      DSINFER_CHECK(unit.empty(), "bucket bounds \"", text, "\": unknown unit in \"", item, "\" (K or M)");
    }
    DSINFER_CHECK(value > 0 && (bounds.empty() || value > bounds.back()),
                  "bucket bounds \"", text, "\" must be positive and ascending");
    bounds.push_back(value);
    pos = comma + 1;
  }
  return bounds;
}

PrefillBalancer::PrefillBalancer(PrefillBalancerConfig config) : config_(std::move(config)) {
  for (size_t i = 1; i < config_.bucket_bounds.size(); ++i) {
    DSINFER_CHECK(config_.bucket_bounds[i] > config_.bucket_bounds[i - 1], "prefill bucket bounds must ascend");
  }
  buckets_.resize(config_.bucket_bounds.size() + 1);
}

size_t PrefillBalancer::bucket_of(int64_t prompt_tokens) const {
  const auto& b = config_.bucket_bounds;
  return static_cast<size_t>(std::upper_bound(b.begin(), b.end(), prompt_tokens) - b.begin());
}

void PrefillBalancer::enqueue(const PrefillJob& job) {
  DSINFER_CHECK(job.compute_tokens >= 1 && job.compute_tokens <= std::max<int64_t>(job.prompt_tokens, 1),
                "prefill job ", job.id, ": compute tokens ", job.compute_tokens, " outside [1, prompt "
                              , job.prompt_tokens, "]");
  buckets_[bucket_of(job.prompt_tokens)].push_back({job, next_order_++});
}

bool PrefillBalancer::cancel(uint64_t id) {
  for (auto& bucket : buckets_) {
    for (auto it = bucket.begin(); it != bucket.end(); ++it) {
      if (it->job.id == id) {
        bucket.erase(it);
        return true;
      }
    }
  }
  return false;
}

bool PrefillBalancer::older(const Entry& a, const Entry& b) const {
  if (a.job.arrival_ns != b.job.arrival_ns) return a.job.arrival_ns < b.job.arrival_ns;
  return a.order < b.order;
}

std::vector<PrefillJob> PrefillBalancer::pull(int64_t remaining, int64_t capacity, int64_t now_ns,
                                              size_t max_jobs) {
  DSINFER_CHECK(capacity > 0 && remaining >= 0 && remaining <= capacity,
                "prefill pull: remaining quota ", remaining, " outside [0, ", capacity, "]");
  std::vector<PrefillJob> taken;
  bool idle = remaining == capacity;
  while (taken.size() < max_jobs) {
    std::deque<Entry>* oldest = nullptr;
    std::deque<Entry>* oldest_fitting = nullptr;
    for (auto& bucket : buckets_) {
      if (bucket.empty()) continue;
      const Entry& head = bucket.front();
      if (!oldest || older(head, oldest->front())) oldest = &bucket;
      if (head.job.compute_tokens <= remaining && (!oldest_fitting || older(head, oldest_fitting->front()))) {
        oldest_fitting = &bucket;
      }
    }
    if (!oldest) break;
    std::deque<Entry>* chosen = nullptr;
    const Entry& head = oldest->front();
    if (head.job.compute_tokens <= remaining || idle) {
      chosen = oldest;  // rule 1
    } else if (now_ns - head.job.arrival_ns < config_.starvation_ns) {
      chosen = oldest_fitting;  // rule 2 (null when nothing fits)
    }
    if (!chosen) break;  // rule 3, or nothing fits
    const PrefillJob job = chosen->front().job;
    chosen->pop_front();
    remaining = std::max<int64_t>(0, remaining - job.compute_tokens);
    idle = false;
    taken.push_back(job);
    if (remaining == 0) break;
  }
  return taken;
}

PrefillRoom prefill_room(const PrefillWorkerLoad& w, int64_t quota_tokens, int64_t unknown_max_running) {
  const int64_t max_running = w.max_running > 0 ? w.max_running : unknown_max_running;
  const int64_t other_requests = std::max<int64_t>(0, w.heartbeat_requests - w.own_requests_at_heartbeat);
  const int64_t other_tokens = std::max<int64_t>(0, w.heartbeat_tokens - w.own_tokens_at_heartbeat);
  PrefillRoom room;
  room.requests = std::max<int64_t>(0, max_running - w.own_requests - other_requests);
  room.tokens = std::max<int64_t>(0, quota_tokens - w.own_tokens - other_tokens);
  return room;
}

size_t PrefillBalancer::queued() const {
  size_t n = 0;
  for (const auto& bucket : buckets_) n += bucket.size();
  return n;
}

int64_t PrefillBalancer::queued_compute_tokens(size_t bucket) const {
  int64_t total = 0;
  for (const auto& e : buckets_.at(bucket)) total += e.job.compute_tokens;
  return total;
}

}  // namespace dsinfer::router
