// The prefill balancer (deepinfer-system.md §2.4): requests wait in buckets by prompt length, and prefill
// workers pull work according to their remaining compute quota. There is no prefix affinity: every prefill
// worker reaches every prefix through the shared KV store, so only compute is balanced.
//
// Pull rule (one call per worker that has spare quota; README.md "Prefill ordering"):
//  1. The oldest head of all buckets (by arrival, then by enqueue order) is taken when its compute fits the
//     worker's remaining quota, or when the worker is idle (a prompt longer than one quota is chunked by
//     the worker over several steps, so an idle worker must be able to start it).
//  2. Otherwise the oldest head among the buckets whose head fits is taken: short prompts fill the quota
//     a long one cannot use. Within a bucket the order is FIFO.
//  3. A head that has waited `starvation_ns` or longer is never bypassed: rule 2 stops, workers drain and
//     the first idle one takes it.
// The worker repeats until nothing fits; the jobs come back in the order taken.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace dsinfer::router {

struct PrefillBalancerConfig {
  // Upper bounds (exclusive) of every bucket but the last, ascending: {16K, 64K, 256K} makes the four
  // buckets <16K, 16K-64K, 64K-256K and >=256K prompt tokens (§2.4).
  std::vector<int64_t> bucket_bounds = {16 * 1024, 64 * 1024, 256 * 1024};
  // How long a job may be bypassed by younger, shorter ones (rule 3).
  int64_t starvation_ns = 2'000'000'000;
};

// "16K,64K,256K" (K = 1024, M = 1024²; plain numbers are tokens) -> ascending bounds; fails on anything else.
std::vector<int64_t> parse_bucket_bounds(const std::string& text);

struct PrefillJob {
  uint64_t id = 0;
  int64_t prompt_tokens = 0;   // picks the bucket
  int64_t compute_tokens = 0;  // tokens to compute: prompt minus the prefix found in the KV store; >= 1
  int64_t arrival_ns = 0;
};

class PrefillBalancer {
 public:
  explicit PrefillBalancer(PrefillBalancerConfig config = {});

  size_t bucket_count() const { return buckets_.size(); }
  size_t bucket_of(int64_t prompt_tokens) const;

  void enqueue(const PrefillJob& job);
  // Removes a queued job (a client that left); false when it is not queued.
  bool cancel(uint64_t id);

  // A worker with `remaining` tokens of quota left out of `capacity` per step asks for work at `now_ns`
  // (remaining == capacity means the worker is idle); it takes at most max_jobs.
  std::vector<PrefillJob> pull(int64_t remaining, int64_t capacity, int64_t now_ns,
                               size_t max_jobs = static_cast<size_t>(-1));

  size_t queued() const;
  size_t queued(size_t bucket) const { return buckets_.at(bucket).size(); }
  int64_t queued_compute_tokens(size_t bucket) const;

 private:
  struct Entry {
    PrefillJob job;
    uint64_t order;  // enqueue order: breaks ties between equal arrival times deterministically
  };
  bool older(const Entry& a, const Entry& b) const;

  PrefillBalancerConfig config_;
  std::vector<std::deque<Entry>> buckets_;
  uint64_t next_order_ = 0;
};

// What one router may still send a prefill worker. The router knows its own prefills on the worker; the
// worker's heartbeat tells its whole load, from every router: the engine's running + waiting requests and
// the prompt tokens of the prefills it has not answered. The others' share is that load less this
// router's own when the heartbeat came (so neither a stale heartbeat nor calls since count twice):
//   requests = max_running - own_requests - max(0, heartbeat requests - own requests at the heartbeat)
//   tokens   = quota       - own_tokens   - max(0, heartbeat tokens   - own tokens at the heartbeat)
// so several routers over one pool together stay within each worker's limits (up to one heartbeat of lag).
struct PrefillWorkerLoad {
  int64_t max_running = 0;  // the heartbeat's capacity; 0: unknown (unknown_max_running)
  int64_t heartbeat_requests = 0, heartbeat_tokens = 0;  // running + waiting; prefill_tokens
  int64_t own_requests_at_heartbeat = 0, own_tokens_at_heartbeat = 0;
  int64_t own_requests = 0, own_tokens = 0;  // now
};
struct PrefillRoom {
  int64_t requests = 0;
  int64_t tokens = 0;
  bool any() const { return requests > 0 && tokens > 0; }
};
PrefillRoom prefill_room(const PrefillWorkerLoad& w, int64_t quota_tokens, int64_t unknown_max_running);

}  // namespace dsinfer::router
