// The UCX transport between two real processes (this test and disagg_ucx_peer), over the transports
// UCX_TLS selects: tcp and shm (posix/sysv shared memory, cma), each parameterised below. A transport this
// UCX build lacks is skipped with a message naming it.
#include "disagg/ucx_transport.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "ucx_test_pattern.h"

extern char** environ;

namespace dsinfer::disagg {
namespace {

using testing::test_pattern;
using namespace std::chrono_literals;

class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    std::string exe = DSINFER_UCX_PEER;
    argv.push_back(exe.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, exe.c_str(), nullptr, nullptr, argv.data(), environ);
    if (rc != 0) throw std::runtime_error("cannot start " + exe);
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  // The raw wait status. The test's transport keeps progressing meanwhile: the peer flushes its last
  // messages before it exits, and a flush needs this side's answer.
  int wait(Transport& transport) {
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) transport.progress();
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
};

bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
bool was_killed(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

class UcxTransport : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    setenv("UCX_TLS", GetParam(), 1);
    TransportOptions options;
    options.chunk_bytes = 1 << 20;
    // UCX 1.13 connects through a listener over network transports only: shared memory needs the peers
    // to connect to each other's worker address (ucx_transport.h).
    options.advertise_worker_address = std::string(GetParam()) == "shm";
    try {
      transport_ = std::make_unique<Transport>(options);
    } catch (const core::Error& e) {
      GTEST_SKIP() << "UCX_TLS=" << GetParam() << " is not available in this UCX build: " << e.what();
    }
  }
  void TearDown() override {
    transport_.reset();
    unsetenv("UCX_TLS");
  }

  // Starts the peer process and returns its address from its hello.
  std::string start(std::unique_ptr<Child>& child, const std::vector<std::string>& args, uint64_t transfer) {
    std::vector<std::string> full = {args[0], transport_->address()};
    full.insert(full.end(), args.begin() + 1, args.end());
    child = std::make_unique<Child>(full);
    const auto hello = transport_->receive(FrameKind::kHello, transfer, deadline_in(30s));
    return std::string(hello.begin(), hello.end());
  }

  std::unique_ptr<Transport> transport_;
};

constexpr size_t kBytes = (8 << 20) + 123;  // 8 MiB and a partial chunk

TEST_P(UcxTransport, SendsAMultiMibPayloadToAnotherProcess) {
  std::unique_ptr<Child> child;
  const std::string peer = start(child, {"recv", "7", std::to_string(kBytes)}, 7);
  const auto payload = test_pattern(7, kBytes);
  transport_->send(peer, FrameKind::kData, 7, payload, deadline_in(30s));
  EXPECT_TRUE(transport_->receive(FrameKind::kDone, 7, deadline_in(30s)).empty());
  const std::string lanes = transport_->describe_endpoint(peer);  // while the peer is still there
  transport_->send(peer, FrameKind::kControl, 7, {}, deadline_in(30s));
  EXPECT_TRUE(exited_ok(child->wait(*transport_)));
  RecordProperty("lanes", lanes);
  if (std::string(GetParam()) == "tcp") {
    EXPECT_NE(lanes.find("tcp/"), std::string::npos) << lanes;
  } else {
    // Every data lane is shared memory (posix, sysv) or cross-memory attach: no tcp.
    EXPECT_EQ(lanes.find("tcp/"), std::string::npos) << lanes;
    EXPECT_TRUE(lanes.find("posix/") != std::string::npos || lanes.find("sysv/") != std::string::npos ||
                lanes.find("cma/") != std::string::npos)
        << lanes;
  }
}

TEST_P(UcxTransport, ReceivesAMultiMibPayloadFromAnotherProcess) {
  std::unique_ptr<Child> child;
  const std::string peer = start(child, {"send", "8", std::to_string(kBytes)}, 8);
  EXPECT_EQ(transport_->receive(FrameKind::kData, 8, deadline_in(30s)), test_pattern(8, kBytes));
  transport_->send(peer, FrameKind::kDone, 8, {}, deadline_in(30s));
  EXPECT_TRUE(exited_ok(child->wait(*transport_)));
}

TEST_P(UcxTransport, PeerPullsRegisteredMemory) {
  std::unique_ptr<Child> child;
  const std::string peer = start(child, {"claim", "9", std::to_string(kBytes)}, 9);
  const auto payload = test_pattern(9, kBytes);
  transport_->serve_pull(peer, 9, payload, deadline_in(30s));
  EXPECT_EQ(transport_->exposed(), 0u);
  EXPECT_TRUE(exited_ok(child->wait(*transport_)));
}

TEST_P(UcxTransport, PullsRegisteredMemoryOfAnotherProcess) {
  std::unique_ptr<Child> child;
  start(child, {"serve", "10", std::to_string(kBytes)}, 10);
  EXPECT_EQ(transport_->claim_pull(10, deadline_in(30s)), test_pattern(10, kBytes));
  EXPECT_TRUE(exited_ok(child->wait(*transport_)));
}

TEST_P(UcxTransport, ReceiverDyingMidTransferFailsTheSender) {
  std::unique_ptr<Child> child;
  const size_t bytes = 32 << 20;  // 32 chunks; the peer dies after receiving 3
  const std::string peer = start(child, {"recv", "11", std::to_string(bytes), "3"}, 11);
  const auto payload = test_pattern(11, bytes);
  EXPECT_THROW(
      {
        transport_->send(peer, FrameKind::kData, 11, payload, deadline_in(5s));
        transport_->receive(FrameKind::kDone, 11, deadline_in(5s));
      },
      core::Error);
  EXPECT_TRUE(was_killed(child->wait(*transport_)));
}

TEST_P(UcxTransport, SenderDyingMidTransferFailsTheReceiver) {
  std::unique_ptr<Child> child;
  const size_t bytes = 32 << 20;  // the peer dies before sending chunk 5 of 32
  start(child, {"send", "12", std::to_string(bytes), "5"}, 12);
  try {
    transport_->receive(FrameKind::kData, 12, deadline_in(5s));
    ADD_FAILURE() << "a payload whose sender died arrived whole";
  } catch (const core::Error& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::kInternal) << e.what();
  }
  EXPECT_TRUE(was_killed(child->wait(*transport_)));
}

TEST_P(UcxTransport, UnclaimedPullIsReleasedAtTheDeadline) {
  std::unique_ptr<Child> child;
  // The peer waits for kData and never claims the descriptor.
  const std::string peer = start(child, {"recv", "13", "1"}, 13);
  const auto payload = test_pattern(13, kBytes);
  EXPECT_THROW(transport_->serve_pull(peer, 13, payload, deadline_in(2s)), core::Error);
  EXPECT_EQ(transport_->exposed(), 0u);
}

TEST_P(UcxTransport, OwnerDyingAfterItsDescriptorFailsThePull) {
  std::unique_ptr<Child> child;
  start(child, {"serve", "14", std::to_string(kBytes), "die"}, 14);
  EXPECT_THROW(transport_->claim_pull(14, deadline_in(5s)), core::Error);
  EXPECT_TRUE(was_killed(child->wait(*transport_)));
}

TEST_P(UcxTransport, NobodyListeningIsAnErrorNotAHang) {
  // Port 1 (tcpmux) has no listener here; were one there, it would not speak UCX: either way the send
  // fails or times out.
  EXPECT_THROW(transport_->send("127.0.0.1:1", FrameKind::kData, 15, test_pattern(15, 100), deadline_in(3s)),
               core::Error);
}

INSTANTIATE_TEST_SUITE_P(Tls, UcxTransport, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { std::string n = info.param; for (auto& c : n) if (c == ',') c = '_'; return n; });

}  // namespace
}  // namespace dsinfer::disagg
