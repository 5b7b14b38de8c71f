#include "router/decode_balancer.h"

#include <algorithm>

#include "core/error.h"

namespace dsinfer::router {

double imbalance(const std::vector<double>& values) {
  if (values.empty()) return 1.0;
  double sum = 0, max = 0;
  for (double v : values) {
    sum += v;
    max = std::max(max, v);
  }
  const double mean = sum / static_cast<double>(values.size());
  return mean > 0 ? max / mean : 1.0;
}

DecodeBalancer::DecodeBalancer(double count_weight) : count_weight_(count_weight) {
  DSINFER_CHECK(count_weight >= 0 && count_weight <= 1, "decode balancer: count weight ", count_weight,
                " outside [0, 1]");
}

size_t DecodeBalancer::add_instance(const std::string& id, int64_t max_requests, int64_t kv_capacity_tokens) {
  DSINFER_CHECK(max_requests > 0 && kv_capacity_tokens > 0, "decode instance ", id,
                ": max requests and KV capacity must be positive");
  instances_.push_back({id, max_requests, kv_capacity_tokens, 0, 0, 0, true});
  return instances_.size() - 1;
}

void DecodeBalancer::set_accepting(size_t instance, bool accepting) { instances_.at(instance).accepting = accepting; }

std::optional<size_t> DecodeBalancer::choose(int64_t kv_tokens, int64_t reserve_tokens) const {
  DSINFER_CHECK(kv_tokens >= 0 && reserve_tokens >= kv_tokens, "decode balancer: reserve ", reserve_tokens,
                " below the ", kv_tokens, " tokens held");
  std::optional<size_t> best;
  double best_score = 0;
  for (size_t i = 0; i < instances_.size(); ++i) {
    const auto& d = instances_[i];
    if (!d.accepting || d.requests + 1 > d.max_requests || d.reserved_tokens + reserve_tokens > d.kv_capacity_tokens) {
      continue;
    }
    const double count_share = static_cast<double>(d.requests + 1) / static_cast<double>(d.max_requests);
    const double kv_share = static_cast<double>(d.kv_tokens + kv_tokens) / static_cast<double>(d.kv_capacity_tokens);
    const double score = count_weight_ * count_share + (1 - count_weight_) * kv_share;
    if (!best || score < best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

void DecodeBalancer::place(size_t instance, int64_t kv_tokens, int64_t reserve_tokens) {
  auto& d = instances_.at(instance);
  DSINFER_CHECK_INTERNAL(d.requests + 1 <= d.max_requests && d.reserved_tokens + reserve_tokens <= d.kv_capacity_tokens &&
                             reserve_tokens >= kv_tokens,
                         "decode instance ", d.id, " placed over its limits");
  d.requests += 1;
  d.kv_tokens += kv_tokens;
  d.reserved_tokens += reserve_tokens;
}

void DecodeBalancer::grow(size_t instance, int64_t delta_tokens) {
  auto& d = instances_.at(instance);
  DSINFER_CHECK_INTERNAL(d.kv_tokens + delta_tokens >= 0 && d.kv_tokens + delta_tokens <= d.reserved_tokens,
                         "decode instance ", d.id, ": KV tokens outside [0, reserved]");
  d.kv_tokens += delta_tokens;
}

void DecodeBalancer::release(size_t instance, int64_t kv_tokens, int64_t reserve_tokens) {
  auto& d = instances_.at(instance);
  DSINFER_CHECK_INTERNAL(d.requests >= 1 && d.kv_tokens >= kv_tokens && d.reserved_tokens >= reserve_tokens,
                         "decode instance ", d.id, ": released more than it holds");
  d.requests -= 1;
  d.kv_tokens -= kv_tokens;
  d.reserved_tokens -= reserve_tokens;
}

double DecodeBalancer::request_imbalance() const {
  std::vector<double> v;
  for (const auto& d : instances_) {
    if (d.accepting) v.push_back(static_cast<double>(d.requests));
  }
  return imbalance(v);
}

double DecodeBalancer::kv_imbalance() const {
  std::vector<double> v;
  for (const auto& d : instances_) {
    if (d.accepting) v.push_back(static_cast<double>(d.kv_tokens));
  }
  return imbalance(v);
}

}  // namespace dsinfer::router
