// The KV handoff transport: one UCX context and worker per process, a listener, and client endpoints
// to peers named by "host:port". Payloads move either as framed, checksummed tagged messages (send /
// receive) or by an RMA get from memory the owner registered (expose / pull). README.md has the design:
// who pulls, the framing, the message flow, the timeouts.
//
// Messages are matched by tag (kind + transfer id), never by sender, so a receiver needs no peer
// identity; anything that needs an answer names the address to answer to. Every wait has a deadline:
// a peer that dies mid-transfer makes the call fail (core::Error, kind internal), it never hangs.
// Single-threaded: one thread drives a Transport (UCS_THREAD_MODE_SINGLE).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "disagg/frame.h"

namespace dsinfer::disagg {

struct TransportOptions {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 0;  // 0: any free port (see Transport::address)
  size_t chunk_bytes = 4 << 20;  // a payload travels in chunks of this size (one tagged message each)
  // Advertise "ucx:<hex UCX worker address>" instead of the listener's "host:port". Peers then connect
  // to the worker directly, which every transport can do; a connection through the listener (UCX's
  // client-server mode) can use only network transports in this UCX (1.13), so same-machine shared
  // memory (UCX_TLS=shm) needs this.
  bool advertise_worker_address = false;
  // Fault injection for tests: called before chunk i of a send is posted, and after chunk i of a receive
  // is checked (a test process kills itself there to die at an exact point of a transfer).
  std::function<void(uint32_t chunk)> before_send_chunk;
  std::function<void(uint32_t chunk)> after_receive_chunk;
};

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

class Transport {
 public:
  explicit Transport(TransportOptions options = {});
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // What peers connect to: "host:port" of the listener, or "ucx:<hex>" (advertise_worker_address). Every
  // peer_address below may be either form.
  std::string address() const;

  // Sends `payload` to the peer at `peer_address` as chunk frames tagged (kind, transfer); returns when
  // every chunk has left this process's buffers (for large chunks: when the peer has received them).
  void send(const std::string& peer_address, FrameKind kind, uint64_t transfer, std::span<const uint8_t> payload,
            Deadline deadline);
  // Receives the payload tagged (kind, transfer) from whichever peer sends it, checking every chunk's
  // placement and XXH3.
  std::vector<uint8_t> receive(FrameKind kind, uint64_t transfer, Deadline deadline);

  // Registers `data` (which must outlive the exposure) for RMA reads by peers; returns the descriptor a
  // peer passes to pull(): this transport's address, the buffer's address and length, its XXH3 and the
  // packed remote key.
  std::vector<uint8_t> expose(uint64_t transfer, std::span<const uint8_t> data);
  void unexpose(uint64_t transfer);
  size_t exposed() const { return exposed_.size(); }
  // Reads an exposed buffer with an RMA get over an endpoint to its owner; checks length and XXH3.
  std::vector<uint8_t> pull(std::span<const uint8_t> descriptor, Deadline deadline);

  // The owner's half of a pull handoff: expose `data`, send the descriptor to `peer_address`, wait for the
  // peer's kDone, unexpose. A peer that never claims it (died, or gave up) is an error at the deadline, and
  // the memory is released either way.
  void serve_pull(const std::string& peer_address, uint64_t transfer, std::span<const uint8_t> data,
                  Deadline deadline);
  // The reader's half: receive the descriptor, pull, send kDone to the owner.
  std::vector<uint8_t> claim_pull(uint64_t transfer, Deadline deadline);

  // The reader's half after its descriptor was received (receive(kRkey, transfer)): pull, send kDone.
  std::vector<uint8_t> claim_described(uint64_t transfer, std::span<const uint8_t> descriptor, Deadline deadline);

  // Drives UCX (accepts connections, moves data); waits call it, an idle owner may call it too.
  void progress();
  // Progresses, then whether a message tagged (kind, transfer) is waiting to be received, without taking
  // it: a thread serving many handoffs at once waits for each one's next message this way, so no handoff
  // waits behind another (worker.cpp).
  bool arrived(FrameKind kind, uint64_t transfer);
  // The transports an endpoint to the peer uses, as UCX prints them (e.g. "tcp/lo", "posix/memory").
  std::string describe_endpoint(const std::string& peer_address);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<uint64_t, std::pair<void*, std::vector<uint8_t>>> exposed_;  // transfer -> (ucp_mem_h, descriptor)
};

}  // namespace dsinfer::disagg
