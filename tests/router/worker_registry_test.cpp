#include "router/worker_registry.h"

#include <gtest/gtest.h>

namespace dsinfer::router {
namespace {

constexpr int64_t kLease = 3'000'000'000;

WorkerInfo worker(const std::string& id, WorkerRole role, uint64_t incarnation = 1) {
  return {id, role, "http://" + id, incarnation};
}

std::vector<std::string> ids(const std::vector<WorkerInfo>& ws) {
  std::vector<std::string> out;
  for (const auto& w : ws) out.push_back(w.id);
  return out;
}

TEST(WorkerRegistry, JoinRenewExpireRejoin) {
  WorkerRegistry r(kLease);
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill), 0), HeartbeatEvent::kJoined);
  EXPECT_EQ(r.heartbeat(worker("d1", WorkerRole::kDecode), 0), HeartbeatEvent::kJoined);
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill), 2'000'000'000), HeartbeatEvent::kRenewed);
  // d1's lease ends at 3 s, p1's at 5 s.
  EXPECT_TRUE(r.expire(kLease - 1).empty());
  EXPECT_EQ(r.expire(kLease), (std::vector<std::string>{"d1"}));
  EXPECT_FALSE(r.live("d1"));
  EXPECT_TRUE(r.live("p1"));
  EXPECT_TRUE(r.live_workers(WorkerRole::kDecode).empty());
  EXPECT_EQ(r.expire(kLease), (std::vector<std::string>{}));  // leaves once
  EXPECT_EQ(r.heartbeat(worker("d1", WorkerRole::kDecode), 4'000'000'000), HeartbeatEvent::kRejoined);
  EXPECT_EQ(ids(r.live_workers(WorkerRole::kDecode)), (std::vector<std::string>{"d1"}));
  EXPECT_EQ(r.expire(5'000'000'000), (std::vector<std::string>{"p1"}));
}

TEST(WorkerRegistry, AHeartbeatAfterTheLeaseIsARejoinEvenBeforeExpire) {
  WorkerRegistry r(kLease);
  r.heartbeat(worker("p1", WorkerRole::kPrefill), 0);
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill), kLease), HeartbeatEvent::kRejoined);
}

TEST(WorkerRegistry, NewIncarnationIsARestart) {
  WorkerRegistry r(kLease);
  r.heartbeat(worker("p1", WorkerRole::kPrefill, 1), 0);
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill, 2), 1), HeartbeatEvent::kRestarted);
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill, 2), 2), HeartbeatEvent::kRenewed);
}

TEST(WorkerRegistry, LeaveAndRolesInIdOrder) {
  WorkerRegistry r(kLease);
  r.heartbeat(worker("p2", WorkerRole::kPrefill), 0);
  r.heartbeat(worker("p1", WorkerRole::kPrefill), 0);
  r.heartbeat(worker("d1", WorkerRole::kDecode), 0);
  EXPECT_EQ(ids(r.live_workers(WorkerRole::kPrefill)), (std::vector<std::string>{"p1", "p2"}));
  EXPECT_TRUE(r.leave("p1"));
  EXPECT_FALSE(r.leave("p1"));
  EXPECT_FALSE(r.leave("nobody"));
  EXPECT_EQ(ids(r.live_workers(WorkerRole::kPrefill)), (std::vector<std::string>{"p2"}));
  EXPECT_EQ(r.heartbeat(worker("p1", WorkerRole::kPrefill), 1), HeartbeatEvent::kRejoined);
}

}  // namespace
}  // namespace dsinfer::router
