// The decode balancer (deepinfer-system.md §2.5, §5): a sequence that finished its prefill goes to the decode
// instance that best balances request count and total KV length, within each instance's limits.
//
// Score (the exact DualPath formula is unpublished, so this is ours): an instance i with n_i requests
// holding kv_i KV tokens now, limits max_requests_i and kv_capacity_i, would after taking a sequence of k
// tokens be at
//   count share  c_i = (n_i + 1) / max_requests_i        kv share  m_i = (kv_i + k) / kv_capacity_i
// and gets score  w · c_i + (1 − w) · m_i  (w = count_weight). The lowest score wins; ties go to the lowest
// index. Shares of the instance's own limits make the two terms comparable and let instances differ in size.
// The score uses the KV the sequences hold now (it grows as they decode: grow()); admission uses what they
// may grow to (reserved: prompt + the output still allowed), so an admitted sequence never runs an instance
// out of KV. Eligible: n_i + 1 <= max_requests_i and reserved_i + r <= kv_capacity_i; when no instance is,
// the cluster is full (the router answers 429, the simulator queues).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsinfer::router {

struct DecodeInstanceLoad {
  std::string id;
  int64_t max_requests = 0;  // concurrent sequences the instance decodes
  int64_t kv_capacity_tokens = 0;
  int64_t requests = 0;
  int64_t kv_tokens = 0;        // held now
  int64_t reserved_tokens = 0;  // what the sequences may grow to
  bool accepting = true;  // false while draining or after its lease ended
};

class DecodeBalancer {
 public:
  explicit DecodeBalancer(double count_weight = 0.5);

  // Returns the instance's index (stable until remove_instance).
  size_t add_instance(const std::string& id, int64_t max_requests, int64_t kv_capacity_tokens);
  void set_accepting(size_t instance, bool accepting);

  // The instance a sequence holding `kv_tokens` now and able to grow to `reserve_tokens` (>= kv_tokens:
  // prompt plus the output still allowed) should go to; empty when no instance has room (cluster full).
  // Does not change the state: see place().
  std::optional<size_t> choose(int64_t kv_tokens, int64_t reserve_tokens) const;
  void place(size_t instance, int64_t kv_tokens, int64_t reserve_tokens);
  // A sequence on the instance holds `delta_tokens` more KV (a decoded token: 1); within its reservation.
  void grow(size_t instance, int64_t delta_tokens);
  // A sequence that held `kv_tokens` with `reserve_tokens` reserved left the instance.
  void release(size_t instance, int64_t kv_tokens, int64_t reserve_tokens);

  const std::vector<DecodeInstanceLoad>& instances() const { return instances_; }
  // max/mean of requests and of KV tokens over accepting instances (1 when all are empty).
  double request_imbalance() const;
  double kv_imbalance() const;

 private:
  double count_weight_;
  std::vector<DecodeInstanceLoad> instances_;
};

// max/mean of the values; 1 when the mean is 0 (nothing to balance) or there are none.
double imbalance(const std::vector<double>& values);

}  // namespace dsinfer::router
