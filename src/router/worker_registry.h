// Prefill and decode workers known to the router, kept by leases: a worker heartbeats at least every
// lease period; one that misses its lease leaves the pool (its in-flight work is lost and retried by the
// router), one that heartbeats again rejoins. Pure state: the caller passes the time and acts on the events.
//
// A worker sends an incarnation (e.g. its process start time and pid) with every heartbeat. A new
// incarnation under a live id is a restart that beat the lease: the router must treat the old one's
// in-flight work as lost, exactly as after a lease expiry.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsinfer::router {

enum class WorkerRole { kPrefill, kDecode };
const char* worker_role_name(WorkerRole role);

struct WorkerInfo {
  std::string id;       // unique in the cluster, e.g. host:port
  WorkerRole role = WorkerRole::kPrefill;
  std::string address;  // where the router reaches it
  uint64_t incarnation = 0;
};

enum class HeartbeatEvent {
  kJoined,     // first time seen
  kRenewed,    // same incarnation, lease extended
  kRejoined,   // seen before, had left (lease expired or deregistered)
  kRestarted,  // live, but a new incarnation: the old one's work is lost
};

class WorkerRegistry {
 public:
  explicit WorkerRegistry(int64_t lease_ns);

  HeartbeatEvent heartbeat(const WorkerInfo& info, int64_t now_ns);
  // Ends the leases that ran out by now_ns; returns the ids that left, in id order.
  std::vector<std::string> expire(int64_t now_ns);
  // A worker that shuts down cleanly says so; false when it was not live.
  bool leave(const std::string& id);

  bool live(const std::string& id) const;
  // Live workers of a role, in id order (deterministic for the balancers).
  std::vector<WorkerInfo> live_workers(WorkerRole role) const;
  int64_t lease_ns() const { return lease_ns_; }

 private:
  struct Entry {
    WorkerInfo info;
    int64_t expires_ns = 0;
    bool live = false;
  };
  int64_t lease_ns_;
  std::map<std::string, Entry> workers_;
};

}  // namespace dsinfer::router
