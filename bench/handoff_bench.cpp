// KV handoff bandwidth between two real processes: the disagg Transport's send/receive and its pull
// (serve_pull / claim_pull) next to raw UCX on the same transports, measured in the same run: a contiguous
// tagged send and an RMA get, from user memory and from memory UCX allocated (which is what ucx_perftest
// uses). Numbers, never pass/fail.
//
// Usage: bench_handoff [MiB per transfer (64)] [transfers (10)] [chunk MiB (4)]
// UCX_TLS chooses the transports (e.g. UCX_TLS=tcp, UCX_TLS=shm); with anything but tcp the processes
// connect by UCX worker address (README of src/disagg: UCX 1.13 client-server mode is network only).
#include <signal.h>
#include <sys/wait.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "disagg/ucx_transport.h"

namespace {

using dsinfer::disagg::deadline_in;
using dsinfer::disagg::FrameKind;
using dsinfer::disagg::Transport;
using dsinfer::disagg::TransportOptions;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = std::chrono::seconds(120);

// A pipe each way between the two processes, for addresses and "done" marks (never for payload bytes).
struct Channel {
  int read_fd = -1, write_fd = -1;
  void put(const std::string& s) {
    const uint64_t n = s.size();
    if (write(write_fd, &n, 8) != 8 || write(write_fd, s.data(), n) != static_cast<ssize_t>(n)) {
      throw std::runtime_error("pipe write");
    }
  }
  std::string get() {
    uint64_t n = 0;
    if (read_full(&n, 8) != 8) throw std::runtime_error("pipe read");
    std::string s(n, '\0');
    if (read_full(s.data(), n) != n) throw std::runtime_error("pipe read");
    return s;
  }
  size_t read_full(void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = read(read_fd, static_cast<char*>(p) + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }
};

void check(ucs_status_t st, const char* what) {
  if (st != UCS_OK) throw std::runtime_error(std::string("UCX ") + what + ": " + ucs_status_string(st));
}

// Raw UCX: one context and worker, an endpoint by worker address, waits that busy-poll the worker.
struct RawUcx {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;

  RawUcx() {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    ucp_config_t* config = nullptr;
    check(ucp_config_read(nullptr, nullptr, &config), "config");
    check(ucp_init(&params, config, &context), "init");
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    check(ucp_worker_create(context, &wp, &worker), "worker");
  }
  ~RawUcx() {
    if (ep) {
      ucp_request_param_t p{};
      settle(ucp_ep_flush_nbx(ep, &p));
      settle(ucp_ep_close_nbx(ep, &p));
    }
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
  }
  std::string address() {
    ucp_address_t* a = nullptr;
    size_t n = 0;
    check(ucp_worker_get_address(worker, &a, &n), "worker address");
    std::string out(reinterpret_cast<const char*>(a), n);
    ucp_worker_release_address(worker, a);
    return out;
  }
  void connect(const std::string& peer) {
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    p.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    check(ucp_ep_create(worker, &p, &ep), "connect");
  }
  // Waits without judging the outcome (closing, where the peer may already be gone).
  void settle(void* req) {
    if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
    const auto until = Clock::now() + std::chrono::seconds(2);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until) ucp_worker_progress(worker);
    ucp_request_free(req);
  }
  void wait(void* req) {
    if (req == nullptr) return;
    if (UCS_PTR_IS_ERR(req)) check(UCS_PTR_STATUS(req), "request");
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) ucp_worker_progress(worker);
    ucp_request_free(req);
    check(st, "request");
  }
  void send(const void* data, size_t n, uint64_t tag) {
    ucp_request_param_t p{};
    wait(ucp_tag_send_nbx(ep, data, n, tag, &p));
  }
  void recv(void* data, size_t n, uint64_t tag) {
    ucp_request_param_t p{};
    wait(ucp_tag_recv_nbx(worker, data, n, tag, ~uint64_t{0}, &p));
  }
};

double mb_per_s(size_t bytes, Clock::duration d) {
  return static_cast<double>(bytes) / 1e6 / std::chrono::duration<double>(d).count();
}

struct Sizes {
  size_t bytes, count, chunk;
};

// The owner / sender side ("prefill"): times each phase, from its first send to the last acknowledgement.
void run_prefill(Channel& ch, const Sizes& s, bool worker_address) {
  std::vector<uint8_t> payload(s.bytes);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  const size_t total = s.bytes * s.count;
  {
    TransportOptions o;
    o.chunk_bytes = s.chunk;
    o.advertise_worker_address = worker_address;
    Transport t(o);
    const std::string peer = ch.get();
    ch.put(t.address());
    t.send(peer, FrameKind::kHello, 0, {}, deadline_in(kTimeout));  // wire-up outside the timed part
    t.receive(FrameKind::kDone, 0, deadline_in(kTimeout));
    auto t0 = Clock::now();
    for (size_t i = 1; i <= s.count; ++i) {
      t.send(peer, FrameKind::kData, i, payload, deadline_in(kTimeout));
      t.receive(FrameKind::kDone, i, deadline_in(kTimeout));
    }
    const double send_mbs = mb_per_s(total, Clock::now() - t0);
    t0 = Clock::now();
    for (size_t i = 1; i <= s.count; ++i) t.serve_pull(peer, 1000 + i, payload, deadline_in(kTimeout));
    const double pull_mbs = mb_per_s(total, Clock::now() - t0);
    std::printf("transport send+kDone      %10.1f MB/s\n", send_mbs);
    std::fflush(stdout);
    std::printf("transport serve/claim_pull %9.1f MB/s\n", pull_mbs);
    std::fflush(stdout);
    ch.put("next");  // the peer may close its transport now
  }
  RawUcx u;
  ch.put(u.address());
  u.connect(ch.get());
  uint64_t ack = 0;
  u.send(&ack, 8, 1);
  u.recv(&ack, 8, 2);
  auto t0 = Clock::now();
  for (size_t i = 0; i < s.count; ++i) {
    u.send(payload.data(), payload.size(), 3);
    u.recv(&ack, 8, 4);
  }
  std::printf("raw UCX tag send (contig) %10.1f MB/s\n", mb_per_s(total, Clock::now() - t0));
  std::fflush(stdout);
  // The same, the receiver taking a fresh buffer each time as Transport::receive does.
  t0 = Clock::now();
  for (size_t i = 0; i < s.count; ++i) {
    u.send(payload.data(), payload.size(), 6);
    u.recv(&ack, 8, 4);
  }
  std::printf("  ... into a fresh buffer %10.1f MB/s\n", mb_per_s(total, Clock::now() - t0));
  std::fflush(stdout);
  // Gets: the reader times them; this side exposes the memory and progresses until the reader is done.
  for (int allocated = 0; allocated < 2; ++allocated) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.length = s.bytes;
    if (allocated) {
      mp.field_mask |= UCP_MEM_MAP_PARAM_FIELD_FLAGS;
      mp.address = nullptr;
      mp.flags = UCP_MEM_MAP_ALLOCATE;
    } else {
      mp.address = payload.data();
    }
    ucp_mem_h mem = nullptr;
    check(ucp_mem_map(u.context, &mp, &mem), "mem_map");
    ucp_mem_attr_t attr{};
    attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    check(ucp_mem_query(mem, &attr), "mem_query");
    if (allocated) std::memcpy(attr.address, payload.data(), s.bytes);
    void* rkey = nullptr;
    size_t rkey_size = 0;
    check(ucp_rkey_pack(u.context, mem, &rkey, &rkey_size), "rkey_pack");
    const uint64_t remote = reinterpret_cast<uint64_t>(attr.address);
    ch.put(std::string(reinterpret_cast<const char*>(&remote), 8) + std::string(static_cast<char*>(rkey), rkey_size));
    ucp_rkey_buffer_release(rkey);
    // Progress (gets over tcp need the owner's worker) until the reader's tagged "done".
    ucp_request_param_t p{};
    u.wait(ucp_tag_recv_nbx(u.worker, &ack, 8, 5, ~uint64_t{0}, &p));
    ucp_mem_unmap(u.context, mem);
  }
  ch.get();
}

// The receiving / pulling side ("decode").
void run_decode(Channel& ch, const Sizes& s, bool worker_address) {
  const size_t total = s.bytes * s.count;
  {
    TransportOptions o;
    o.chunk_bytes = s.chunk;
    o.advertise_worker_address = worker_address;
    Transport t(o);
    ch.put(t.address());
    const std::string peer = ch.get();
    t.receive(FrameKind::kHello, 0, deadline_in(kTimeout));
    t.send(peer, FrameKind::kDone, 0, {}, deadline_in(kTimeout));
    for (size_t i = 1; i <= s.count; ++i) {
      const auto got = t.receive(FrameKind::kData, i, deadline_in(kTimeout));
      if (got.size() != s.bytes) throw std::runtime_error("short receive");
      t.send(peer, FrameKind::kDone, i, {}, deadline_in(kTimeout));
    }
    for (size_t i = 1; i <= s.count; ++i) {
      if (t.claim_pull(1000 + i, deadline_in(kTimeout)).size() != s.bytes) throw std::runtime_error("short pull");
    }
    ch.get();
  }
  RawUcx u;
  u.connect(ch.get());
  ch.put(u.address());
  uint64_t ack = 0;
  u.recv(&ack, 8, 1);
  u.send(&ack, 8, 2);
  std::vector<uint8_t> buffer(s.bytes, 1);
  for (size_t i = 0; i < s.count; ++i) {
    u.recv(buffer.data(), buffer.size(), 3);
    u.send(&ack, 8, 4);
  }
  for (size_t i = 0; i < s.count; ++i) {
    std::vector<uint8_t> fresh(s.bytes);
    u.recv(fresh.data(), fresh.size(), 6);
    u.send(&ack, 8, 4);
  }
  for (int allocated = 0; allocated < 2; ++allocated) {
    const std::string d = ch.get();
    uint64_t remote = 0;
    std::memcpy(&remote, d.data(), 8);
    ucp_rkey_h rkey = nullptr;
    check(ucp_ep_rkey_unpack(u.ep, d.data() + 8, &rkey), "rkey_unpack");
    const auto t0 = Clock::now();
    for (size_t i = 0; i < s.count; ++i) {
      ucp_request_param_t p{};
      u.wait(ucp_get_nbx(u.ep, buffer.data(), s.bytes, remote, rkey, &p));
      u.wait(ucp_ep_flush_nbx(u.ep, &p));
    }
    std::fflush(stdout);
    std::printf("raw UCX get (%s) %*.1f MB/s\n", allocated ? "UCX-allocated source" : "user memory source",
                allocated ? 5 : 7, mb_per_s(total, Clock::now() - t0));
    ucp_rkey_destroy(rkey);
    u.send(&ack, 8, 5);
  }
  ch.put("done");
}

}  // namespace

int main(int argc, char** argv) {
  const Sizes s{static_cast<size_t>(argc > 1 ? std::atof(argv[1]) * (1 << 20) : 64 << 20),
                static_cast<size_t>(argc > 2 ? std::atoll(argv[2]) : 10),
                static_cast<size_t>(argc > 3 ? std::atof(argv[3]) * (1 << 20) : 4 << 20)};
  const char* tls = std::getenv("UCX_TLS");
  const bool worker_address = !(tls && std::string(tls) == "tcp");
  std::printf("bench_handoff: %zu transfers of %zu bytes, chunks of %zu, UCX_TLS=%s, connect by %s\n", s.count,
              s.bytes, s.chunk, tls ? tls : "(unset)", worker_address ? "worker address" : "listener");
  std::fflush(stdout);
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) return 1;
  const pid_t pid = fork();
  if (pid < 0) return 1;
  try {
    if (pid == 0) {
      Channel ch{to_child[0], to_parent[1]};
      run_decode(ch, s, worker_address);
      std::fflush(stdout);
      _exit(0);
    }
    Channel ch{to_parent[0], to_child[1]};
    run_prefill(ch, s, worker_address);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_handoff (%s): %s\n", pid == 0 ? "decode" : "prefill", e.what());
    if (pid == 0) _exit(1);
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return 1;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
