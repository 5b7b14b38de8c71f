#include "disagg/ucx_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <ucp/api/ucp.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "disagg/little_endian.h"
#include "core/error.h"

namespace dsinfer::disagg {
namespace {

[[noreturn]] void fail_ucx(const std::string& what, ucs_status_t status) {
  core::fail_internal("UCX: ", what, ": ", ucs_status_string(status));
}

sockaddr_in parse_address(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  DSINFER_CHECK(colon != std::string::npos, "peer address \"", host_port, "\" is not host:port");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  const std::string host = host_port.substr(0, colon);
  DSINFER_CHECK(inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host.c_str(), &sa.sin_addr) == 1,
                "peer address \"", host_port, "\": not an IPv4 address");
  const long port = std::strtol(host_port.c_str() + colon + 1, nullptr, 10);
  DSINFER_CHECK(port > 0 && port < 65536, "peer address \"", host_port, "\": bad port");
  sa.sin_port = htons(static_cast<uint16_t>(port));
  return sa;
}

constexpr const char* kWorkerAddressPrefix = "ucx:";

std::string to_hex(const uint8_t* data, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[data[i] >> 4]);
    out.push_back(digits[data[i] & 15]);
  }
  return out;
}

std::vector<uint8_t> from_hex(const std::string& hex) {
  DSINFER_CHECK(hex.size() % 2 == 0 && !hex.empty(), "UCX worker address: odd or empty hex");
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    core::fail("UCX worker address: bad hex digit '", c, "'");
  };
  std::vector<uint8_t> out;
  for (size_t i = 0; i < hex.size(); i += 2) out.push_back(static_cast<uint8_t>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  return out;
}

uint64_t get_u64(std::span<const uint8_t> in, size_t& pos) {
  DSINFER_CHECK(pos + 8 <= in.size(), "RMA descriptor truncated");
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[pos + i]) << (8 * i);
  pos += 8;
  return v;
}

}  // namespace

struct Transport::Impl {
  struct Peer {
    ucp_ep_h ep = nullptr;
    bool failed = false;
    ucs_status_t failure = UCS_OK;
  };

  TransportOptions options;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  ucp_listener_h listener = nullptr;
  std::string address;
  std::map<std::string, std::unique_ptr<Peer>> peers;  // client endpoints, by the peer's address
  std::vector<ucp_ep_h> accepted;  // server endpoints of peers that connected to us (kept open, unused for sends)

  static void on_connection(ucp_conn_request_h request, void* arg) {
    auto* self = static_cast<Impl*>(arg);
    ucp_ep_params_t p{};
    p.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.conn_request = request;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};  // its peer left; its requests fail on their own
    p.err_handler.arg = nullptr;
    ucp_ep_h ep = nullptr;
    if (ucp_ep_create(self->worker, &p, &ep) == UCS_OK) self->accepted.push_back(ep);
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* peer = static_cast<Peer*>(arg);
    peer->failed = true;
    peer->failure = status;
  }

  Peer& peer(const std::string& peer_address) {
    auto it = peers.find(peer_address);
    if (it != peers.end() && !it->second->failed) return *it->second;
    if (it != peers.end()) drop(it->first);
    auto p = std::make_unique<Peer>();
    ucp_ep_params_t ep{};
    sockaddr_in sa{};
    std::vector<uint8_t> worker_address;
    if (peer_address.rfind(kWorkerAddressPrefix, 0) == 0) {
      worker_address = from_hex(peer_address.substr(std::strlen(kWorkerAddressPrefix)));
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
      ep.address = reinterpret_cast<const ucp_address_t*>(worker_address.data());
    } else {
      sa = parse_address(peer_address);
      ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
      ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
      ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
      ep.sockaddr.addrlen = sizeof(sa);
    }
    if (worker_address.empty()) {
      // Worker-address connections exist for shared memory, which has no peer-failure handling in UCX
      // 1.13 (asking for it makes the endpoint unreachable); there a dead peer is found by the deadlines.
      ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = &Impl::on_peer_error;
      ep.err_handler.arg = p.get();
    }
    const ucs_status_t st = ucp_ep_create(worker, &ep, &p->ep);
    if (st != UCS_OK) fail_ucx("connect to " + peer_address, st);
    return *peers.emplace(peer_address, std::move(p)).first->second;
  }

  // Closes and forgets a client endpoint; outstanding operations on it complete with an error.
  void drop(const std::string& peer_address) {
    auto it = peers.find(peer_address);
    if (it == peers.end()) return;
    close_ep(it->second->ep, /*flush_first=*/false);
    peers.erase(it);
  }

  // Closes an endpoint. With flush_first, its sends are flushed out first (bounded): a send completes as
  // soon as its bytes are buffered, so a process that closed right after its last send could lose it.
  // The close itself is forced: a graceful one waits for the peer to answer, which it may never do.
  void close_ep(ucp_ep_h ep, bool flush_first) {
    if (flush_first) {
      ucp_request_param_t f{};
      wait_bounded(ucp_ep_flush_nbx(ep, &f), std::chrono::milliseconds(2000));
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    wait_bounded(ucp_ep_close_nbx(ep, &p), std::chrono::milliseconds(1000));
  }

  // Progresses until the request completes or `limit` passes; frees it either way (UCX releases a freed
  // request when it completes).
  void wait_bounded(void* req, std::chrono::milliseconds limit) {
    if (req == nullptr || UCS_PTR_IS_ERR(req)) return;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker);
    }
    ucp_request_free(req);
  }

  // Waits for a non-blocking operation. On the deadline a receive is cancelled; a send or get is failed
  // by closing its endpoint (UCX cannot cancel those), which is why the caller passes the peer.
  ucs_status_t wait(void* req, Deadline deadline, const std::string* peer_address) {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    ucs_status_t st;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
      if (std::chrono::steady_clock::now() >= deadline) {
        if (peer_address) {
          drop(*peer_address);
        } else {
          ucp_request_cancel(worker, req);
        }
        wait_bounded(req, std::chrono::milliseconds(1000));
        return UCS_ERR_TIMED_OUT;
      }
      ucp_worker_progress(worker);
    }
    ucp_request_free(req);
    return st;
  }
};

Transport::Transport(TransportOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = std::move(options);
  DSINFER_CHECK(m.options.chunk_bytes >= 1, "KV handoff chunk size must be positive");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) fail_ucx("read configuration", st);
  st = ucp_init(&params, config, &m.context);
  ucp_config_release(config);
  if (st != UCS_OK) fail_ucx("init (check UCX_TLS)", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(m.context, &wp, &m.worker);
  if (st != UCS_OK) {
    ucp_cleanup(m.context);
    fail_ucx("create worker", st);
  }
  sockaddr_in sa = parse_address(m.options.listen_host + ":1");
  sa.sin_port = htons(m.options.listen_port);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof(sa);
  lp.conn_handler.cb = &Impl::on_connection;
  lp.conn_handler.arg = &m;
  st = ucp_listener_create(m.worker, &lp, &m.listener);
  if (st != UCS_OK) {
    ucp_worker_destroy(m.worker);
    ucp_cleanup(m.context);
    fail_ucx("listen on " + m.options.listen_host + ":" + std::to_string(m.options.listen_port), st);
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(m.listener, &attr);
  if (st != UCS_OK) fail_ucx("query listener", st);
  const auto* bound = reinterpret_cast<const sockaddr_in*>(&attr.sockaddr);
  m.address = m.options.listen_host + ":" + std::to_string(ntohs(bound->sin_port));
  if (m.options.advertise_worker_address) {
    ucp_address_t* a = nullptr;
    size_t n = 0;
    st = ucp_worker_get_address(m.worker, &a, &n);
    if (st != UCS_OK) fail_ucx("get the worker address", st);
    m.address = kWorkerAddressPrefix + to_hex(reinterpret_cast<const uint8_t*>(a), n);
    ucp_worker_release_address(m.worker, a);
  }
}

Transport::~Transport() {
  Impl& m = *impl_;
  for (auto& [id, e] : exposed_) ucp_mem_unmap(m.context, static_cast<ucp_mem_h>(e.first));
  // Flushed first: the last messages this process sent reach their peers before it goes.
  for (auto& [address, peer] : m.peers) m.close_ep(peer->ep, /*flush_first=*/!peer->failed);
  m.peers.clear();
  for (ucp_ep_h ep : m.accepted) m.close_ep(ep, /*flush_first=*/false);
  if (m.listener) ucp_listener_destroy(m.listener);
  ucp_worker_destroy(m.worker);
  ucp_cleanup(m.context);
}

std::string Transport::address() const { return impl_->address; }

void Transport::progress() { ucp_worker_progress(impl_->worker); }

bool Transport::arrived(FrameKind kind, uint64_t transfer) {
  Impl& m = *impl_;
  while (ucp_worker_progress(m.worker) != 0) {
  }
  ucp_tag_recv_info_t info{};
  return ucp_tag_probe_nb(m.worker, frame_tag(kind, transfer), ~uint64_t{0}, 0, &info) != nullptr;
}

// A chunk travels as two tagged messages: its 48-byte header under the frame tag, then its bytes,
// contiguous, under the same tag with this bit set (kinds stay below 128, so the bit is free). Headers
// and bodies each arrive in the order they were sent. The bytes go contiguous because UCX's zero-copy
// rendezvous does not take an iov of header + bytes (ucx_perftest -D iov ran at half a contiguous tag
// send); a receiver reads the small headers first and posts every body straight into place.
constexpr uint64_t kBodyTagBit = uint64_t{1} << 63;

void Transport::send(const std::string& peer_address, FrameKind kind, uint64_t transfer,
                     std::span<const uint8_t> payload, Deadline deadline) {
  Impl& m = *impl_;
  Impl::Peer& peer = m.peer(peer_address);
  const size_t chunk = m.options.chunk_bytes;
  const size_t count = payload.empty() ? 1 : (payload.size() + chunk - 1) / chunk;
  DSINFER_CHECK(count <= UINT32_MAX, "KV handoff payload of ", payload.size(), " bytes has too many chunks");
  const uint64_t tag = frame_tag(kind, transfer);
  // Every chunk is posted before the first wait, so the chunks stream back to back.
  std::vector<std::array<uint8_t, kFrameHeaderBytes>> headers(count);
  std::vector<void*> requests;
  for (size_t i = 0; i < count; ++i) {
    const size_t offset = i * chunk;
    const size_t bytes = std::min(chunk, payload.size() - std::min(offset, payload.size()));
    FrameHeader h;
    h.kind = kind;
    h.transfer = transfer;
    h.total_bytes = payload.size();
    h.chunk_index = static_cast<uint32_t>(i);
    h.chunk_count = static_cast<uint32_t>(count);
    h.chunk_offset = offset;
    h.chunk_xxh3 = payload_xxh3(payload.subspan(std::min(offset, payload.size()), bytes));
    encode_frame_header(h, headers[i].data());
    if (m.options.before_send_chunk) m.options.before_send_chunk(static_cast<uint32_t>(i));
    ucp_request_param_t p{};
    requests.push_back(ucp_tag_send_nbx(peer.ep, headers[i].data(), kFrameHeaderBytes, tag, &p));
    if (bytes) requests.push_back(ucp_tag_send_nbx(peer.ep, payload.data() + offset, bytes, tag | kBodyTagBit, &p));
  }
  ucs_status_t first_error = UCS_OK;
  for (void* req : requests) {
    if (first_error == UCS_OK) {
      first_error = m.wait(req, deadline, &peer_address);
    } else if (req != nullptr && !UCS_PTR_IS_ERR(req)) {
      ucp_request_free(req);  // the endpoint is closed: released when UCX completes it, not waited for
    }
  }
  if (first_error != UCS_OK) {
    m.drop(peer_address);
    fail_ucx("send transfer " + std::to_string(transfer) + " (" + std::to_string(payload.size()) + " bytes) to " +
                 peer_address,
             first_error);
  }
}

std::vector<uint8_t> Transport::receive(FrameKind kind, uint64_t transfer, Deadline deadline) {
  Impl& m = *impl_;
  const uint64_t tag = frame_tag(kind, transfer);
  std::vector<uint8_t> out;
  uint64_t total = 0;
  uint32_t count = 1;
  std::vector<uint64_t> offsets;
  std::vector<uint64_t> sums;
  std::vector<ucp_tag_recv_info_t> infos;  // filled by UCX for a body that completes as it is posted
  // Body receives posted into `out`: cancelled and settled before `out` can go away on an error.
  std::vector<void*> bodies;
  struct Settle {
    Impl& m;
    std::vector<void*>& reqs;
    ~Settle() {
      for (void* r : reqs) {
        if (r == nullptr || UCS_PTR_IS_ERR(r)) continue;
        if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(m.worker, r);
        m.wait_bounded(r, std::chrono::milliseconds(1000));
      }
    }
  } settle{m, bodies};
  // Headers first (small, eager): each one tells where its body goes, which is posted at once.
  for (uint32_t index = 0; index < count; ++index) {
    uint8_t header[kFrameHeaderBytes];
    ucp_request_param_t p{};
    void* req = ucp_tag_recv_nbx(m.worker, header, kFrameHeaderBytes, tag, ~uint64_t{0}, &p);
    const ucs_status_t st = m.wait(req, deadline, nullptr);
    if (st == UCS_ERR_TIMED_OUT || st == UCS_ERR_CANCELED) {
      core::fail_internal("KV handoff: transfer ", transfer, ": chunk ", index, " of ", count,
                          " did not arrive before the deadline (the sender died or stalled)");
    }
    if (st != UCS_OK) fail_ucx("receive transfer " + std::to_string(transfer), st);
    const FrameHeader h = decode_frame_header({header, kFrameHeaderBytes});
    DSINFER_CHECK(h.kind == kind && h.transfer == transfer, "KV handoff: a frame for another transfer matched ",
                  transfer);
    if (index == 0) {
      count = h.chunk_count;
      total = h.total_bytes;
      DSINFER_CHECK(count >= 1 && count <= total + 1, "KV handoff: transfer ", transfer, ": ", count,
                    " chunks for ", total, " bytes");
      out.resize(total);
      infos.resize(count);
    }
    const uint64_t offset = h.chunk_offset;
    DSINFER_CHECK(h.chunk_index == index && h.chunk_count == count && h.total_bytes == total &&
                      (index == 0 ? offset == 0 : offset > offsets.back()) && (offset < total || total == 0),
                  "KV handoff: transfer ", transfer, ": chunk ", h.chunk_index, " of ", h.chunk_count, " at offset ",
                  offset, " arrived where chunk ", index, " of ", count, " was expected");
    offsets.push_back(offset);
    sums.push_back(h.chunk_xxh3);
    if (total > 0) {
      ucp_request_param_t bp{};
      // The received length comes back through the callback, always called (no immediate completion).
      bp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
      bp.cb.recv = [](void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user_data) {
        if (status == UCS_OK) *static_cast<ucp_tag_recv_info_t*>(user_data) = *info;
      };
      bp.user_data = &infos[index];
      bodies.push_back(ucp_tag_recv_nbx(m.worker, out.data() + offset, total - offset, tag | kBodyTagBit,
                                        ~uint64_t{0}, &bp));
    }
  }
  for (uint32_t index = 0; index < count && total > 0; ++index) {
    const uint64_t end = index + 1 < count ? offsets[index + 1] : total;
    void* req = bodies[index];
    bodies[index] = nullptr;
    ucs_status_t st = UCS_OK;
    if (req == nullptr) {
      // not expected (NO_IMM_CMPL): infos[index] would hold what UCX reported
    } else if (UCS_PTR_IS_ERR(req)) {
      st = UCS_PTR_STATUS(req);
    } else {
      while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS) {
        if (std::chrono::steady_clock::now() >= deadline) {
          bodies[index] = req;  // the guard cancels it
          core::fail_internal("KV handoff: transfer ", transfer, ": chunk ", index, " of ", count,
                              " did not arrive before the deadline (the sender died or stalled)");
        }
        ucp_worker_progress(m.worker);
      }
      ucp_request_free(req);
    }
    if (st != UCS_OK) fail_ucx("receive transfer " + std::to_string(transfer), st);
    const ucp_tag_recv_info_t info = infos[index];
    DSINFER_CHECK(info.length == end - offsets[index], "KV handoff: transfer ", transfer, ": chunk ", index, " has ",
                  info.length, " bytes, its place ", end - offsets[index]);
    DSINFER_CHECK(payload_xxh3({out.data() + offsets[index], info.length}) == sums[index], "KV handoff: transfer ",
                  transfer, ": chunk ", index, " fails its XXH3 checksum");
    if (m.options.after_receive_chunk) m.options.after_receive_chunk(index);
  }
  return out;
}

std::vector<uint8_t> Transport::expose(uint64_t transfer, std::span<const uint8_t> data) {
  Impl& m = *impl_;
  DSINFER_CHECK(!exposed_.count(transfer), "KV handoff: transfer ", transfer, " is already exposed");
  DSINFER_CHECK(!data.empty(), "KV handoff: nothing to expose for transfer ", transfer);
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = const_cast<uint8_t*>(data.data());
  mp.length = data.size();
  ucp_mem_h mem = nullptr;
  ucs_status_t st = ucp_mem_map(m.context, &mp, &mem);
  if (st != UCS_OK) fail_ucx("register " + std::to_string(data.size()) + " bytes", st);
  void* rkey = nullptr;
  size_t rkey_size = 0;
  st = ucp_rkey_pack(m.context, mem, &rkey, &rkey_size);
  if (st != UCS_OK) {
    ucp_mem_unmap(m.context, mem);
    fail_ucx("pack a remote key", st);
  }
  std::vector<uint8_t> d;
  put_u64(d, m.address.size());
  d.insert(d.end(), m.address.begin(), m.address.end());
  put_u64(d, reinterpret_cast<uint64_t>(data.data()));
  put_u64(d, data.size());
  put_u64(d, payload_xxh3(data));
  put_u64(d, rkey_size);
  const auto* r = static_cast<const uint8_t*>(rkey);
  d.insert(d.end(), r, r + rkey_size);
  ucp_rkey_buffer_release(rkey);
  exposed_[transfer] = {mem, d};
  return d;
}

void Transport::unexpose(uint64_t transfer) {
  auto it = exposed_.find(transfer);
  if (it == exposed_.end()) return;
  ucp_mem_unmap(impl_->context, static_cast<ucp_mem_h>(it->second.first));
  exposed_.erase(it);
}

std::vector<uint8_t> Transport::pull(std::span<const uint8_t> descriptor, Deadline deadline) {
  Impl& m = *impl_;
  size_t pos = 0;
  const uint64_t address_len = get_u64(descriptor, pos);
  DSINFER_CHECK(address_len <= 65536 && pos + address_len <= descriptor.size(), "RMA descriptor: bad address");
  const std::string owner(reinterpret_cast<const char*>(descriptor.data() + pos), address_len);
  pos += address_len;
  const uint64_t remote = get_u64(descriptor, pos);
  const uint64_t length = get_u64(descriptor, pos);
  const uint64_t xxh3 = get_u64(descriptor, pos);
  const uint64_t rkey_size = get_u64(descriptor, pos);
  DSINFER_CHECK(pos + rkey_size == descriptor.size(), "RMA descriptor: remote key of ", rkey_size,
                " bytes does not match the descriptor's size");
  DSINFER_CHECK(length <= (uint64_t{1} << 40), "RMA descriptor: length ", length, " is implausible");
  Impl::Peer& peer = m.peer(owner);
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(peer.ep, descriptor.data() + pos, &rkey);
  if (st != UCS_OK) fail_ucx("unpack the remote key of " + owner, st);
  std::vector<uint8_t> out(length);
  ucp_request_param_t p{};
  void* req = ucp_get_nbx(peer.ep, out.data(), length, remote, rkey, &p);
  st = m.wait(req, deadline, &owner);
  if (st == UCS_OK) {
    // The get's data is in place only once the endpoint is flushed (RMA completion is local otherwise).
    st = m.wait(ucp_ep_flush_nbx(peer.ep, &p), deadline, &owner);
  }
  ucp_rkey_destroy(rkey);
  if (st != UCS_OK) {
    m.drop(owner);
    fail_ucx("RMA get of " + std::to_string(length) + " bytes from " + owner, st);
  }
  DSINFER_CHECK(payload_xxh3(out) == xxh3, "KV handoff: ", length, " bytes pulled from ", owner,
                " fail their XXH3 checksum");
  return out;
}

void Transport::serve_pull(const std::string& peer_address, uint64_t transfer, std::span<const uint8_t> data,
                           Deadline deadline) {
  const std::vector<uint8_t> descriptor = expose(transfer, data);
  try {
    send(peer_address, FrameKind::kRkey, transfer, descriptor, deadline);
    receive(FrameKind::kDone, transfer, deadline);
  } catch (...) {
    unexpose(transfer);
    throw;
  }
  unexpose(transfer);
}

std::vector<uint8_t> Transport::claim_pull(uint64_t transfer, Deadline deadline) {
  const std::vector<uint8_t> descriptor = receive(FrameKind::kRkey, transfer, deadline);
  return claim_described(transfer, descriptor, deadline);
}

std::vector<uint8_t> Transport::claim_described(uint64_t transfer, std::span<const uint8_t> descriptor,
                                                Deadline deadline) {
  std::vector<uint8_t> data = pull(descriptor, deadline);
  size_t pos = 0;
  const uint64_t address_len = get_u64(descriptor, pos);
  const std::string owner(reinterpret_cast<const char*>(descriptor.data() + pos), address_len);
  send(owner, FrameKind::kDone, transfer, {}, deadline);
  return data;
}

std::string Transport::describe_endpoint(const std::string& peer_address) {
  Impl& m = *impl_;
  Impl::Peer& peer = m.peer(peer_address);
  // Wire-up completes on the first operation; flush so the lanes shown are the final ones.
  ucp_request_param_t p{};
  m.wait(ucp_ep_flush_nbx(peer.ep, &p), deadline_in(std::chrono::seconds(10)), &peer_address);
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  ucp_ep_print_info(peer.ep, f);
  std::fclose(f);
  std::string out(text, size);
  std::free(text);
  return out;
}

}  // namespace dsinfer::disagg
