#include "router/worker_registry.h"

#include "core/error.h"

namespace dsinfer::router {

const char* worker_role_name(WorkerRole role) { return role == WorkerRole::kPrefill ? "prefill" : "decode"; }

WorkerRegistry::WorkerRegistry(int64_t lease_ns) : lease_ns_(lease_ns) {
  DSINFER_CHECK(lease_ns > 0, "worker lease must be positive");
}

HeartbeatEvent WorkerRegistry::heartbeat(const WorkerInfo& info, int64_t now_ns) {
  DSINFER_CHECK(!info.id.empty(), "worker heartbeat without an id");
  auto [it, inserted] = workers_.try_emplace(info.id);
  Entry& e = it->second;
  HeartbeatEvent event;
  if (inserted) {
    event = HeartbeatEvent::kJoined;
  } else if (!e.live || now_ns >= e.expires_ns) {
    event = HeartbeatEvent::kRejoined;  // also when the lease ran out but expire() was not called yet
  } else if (e.info.incarnation != info.incarnation) {
    event = HeartbeatEvent::kRestarted;
  } else {
    event = HeartbeatEvent::kRenewed;
  }
  e.info = info;
  e.live = true;
  e.expires_ns = now_ns + lease_ns_;
  return event;
}

std::vector<std::string> WorkerRegistry::expire(int64_t now_ns) {
  std::vector<std::string> left;
  for (auto& [id, e] : workers_) {
    if (e.live && now_ns >= e.expires_ns) {
      e.live = false;
      left.push_back(id);
    }
  }
  return left;
}

bool WorkerRegistry::leave(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end() || !it->second.live) return false;
  it->second.live = false;
  return true;
}

bool WorkerRegistry::live(const std::string& id) const {
  auto it = workers_.find(id);
  return it != workers_.end() && it->second.live;
}

std::vector<WorkerInfo> WorkerRegistry::live_workers(WorkerRole role) const {
  std::vector<WorkerInfo> out;
  for (const auto& [id, e] : workers_) {
    if (e.live && e.info.role == role) out.push_back(e.info);
  }
  return out;
}

}  // namespace dsinfer::router
