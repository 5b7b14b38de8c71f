// The other process of the UCX transport tests (ucx_transport_test.cpp). It connects to the test process,
// introduces itself with a kHello carrying its own address, then plays one role:
//   recv  T BYTES [DIE_AFTER]   receive kData T (killing itself after DIE_AFTER chunks), check it, send kDone,
//                               wait for a kControl T before leaving
//   send  T BYTES [DIE_BEFORE]  send kData T (killing itself before chunk DIE_BEFORE), wait for kDone
//   claim T BYTES               claim_pull T (receive the descriptor, RMA get, check, kDone)
//   serve T BYTES [die]         serve_pull T to the test process (or die right after sending the descriptor)
// Exit 0 on success; 1 with a message on stderr otherwise.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "disagg/ucx_transport.h"
#include "ucx_test_pattern.h"

using dsinfer::disagg::deadline_in;
using dsinfer::disagg::FrameKind;
using dsinfer::disagg::Transport;
using dsinfer::disagg::TransportOptions;
using dsinfer::disagg::testing::test_pattern;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: disagg_ucx_peer MODE PARENT_ADDRESS TRANSFER BYTES [ARG]\n");
    return 2;
  }
  const std::string mode = argv[1], parent = argv[2];
  const uint64_t transfer = std::strtoull(argv[3], nullptr, 10);
  const size_t bytes = std::strtoull(argv[4], nullptr, 10);
  const char* arg = argc > 5 ? argv[5] : nullptr;
  const auto timeout = std::chrono::seconds(30);
  try {
    TransportOptions options;
    options.chunk_bytes = 1 << 20;
    options.advertise_worker_address = parent.rfind("ucx:", 0) == 0;  // answer in the form we were given
    if (mode == "recv" && arg) {
      const uint32_t die_after = static_cast<uint32_t>(std::atoi(arg));
      options.after_receive_chunk = [die_after](uint32_t i) {
        if (i + 1 == die_after) raise(SIGKILL);
      };
    }
    if (mode == "send" && arg) {
      const uint32_t die_before = static_cast<uint32_t>(std::atoi(arg));
      options.before_send_chunk = [die_before](uint32_t i) {
        if (i == die_before) raise(SIGKILL);
      };
    }
    Transport t(options);
    const std::string self = t.address();
    t.send(parent, FrameKind::kHello, transfer, {reinterpret_cast<const uint8_t*>(self.data()), self.size()},
           deadline_in(timeout));
    const auto expected = test_pattern(transfer, bytes);
    if (mode == "recv") {
      const auto got = t.receive(FrameKind::kData, transfer, deadline_in(timeout));
      if (got != expected) throw std::runtime_error("received bytes differ from the pattern");
      t.send(parent, FrameKind::kDone, transfer, {}, deadline_in(timeout));
      // Stay (and keep the connection) until the test process says it is done with it.
      t.receive(FrameKind::kControl, transfer, deadline_in(timeout));
    } else if (mode == "send") {
      t.send(parent, FrameKind::kData, transfer, expected, deadline_in(timeout));
      t.receive(FrameKind::kDone, transfer, deadline_in(timeout));
    } else if (mode == "claim") {
      const auto got = t.claim_pull(transfer, deadline_in(timeout));
      if (got != expected) throw std::runtime_error("pulled bytes differ from the pattern");
    } else if (mode == "serve") {
      if (arg && std::string(arg) == "die") {
        const auto descriptor = t.expose(transfer, expected);
        t.send(parent, FrameKind::kRkey, transfer, descriptor, deadline_in(timeout));
        raise(SIGKILL);
      }
      t.serve_pull(parent, transfer, expected, deadline_in(timeout));
    } else {
      std::fprintf(stderr, "disagg_ucx_peer: unknown mode %s\n", mode.c_str());
      return 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "disagg_ucx_peer %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
  return 0;
}
