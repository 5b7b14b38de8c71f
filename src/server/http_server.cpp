#include "server/http_server.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <optional>

#include <sys/resource.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
// GCC 12 reports a boost::optional inside Beast's parser as maybe-uninitialized at -O1/-O2 (a false
// positive in Boost's header).
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#pragma GCC diagnostic pop

#include "core/error.h"
#include "core/log.h"
#include "server/http_request_parser.h"

namespace dsinfer::server {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

std::string_view HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

bool HttpRequest::has_header(std::string_view lower_name) const {
  for (const auto& h : headers)
    if (h.first == lower_name) return true;
  return false;
}

// What every session shares with the server, so that a session never points into the server object.
struct ServerShared {
  HttpLimits limits;
  HttpServer::Handler handler;
  HttpServer::ErrorFormatter error_formatter;
  HttpServerStats stats;
  std::atomic<bool> draining{false};
  std::mutex idle_mu;
  std::condition_variable idle_cv;  // signalled whenever an exchange ends
};

namespace {

std::string lower(boost::beast::string_view s) {
  std::string out(s.data(), s.size());
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string status_line(unsigned version, int status) {
  auto r = http::obsolete_reason(static_cast<http::status>(status));
  std::string_view reason(r.data(), r.size());
  return core::str_cat(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ", status, " ",
                       reason.empty() ? std::string_view("Unknown") : reason, "\r\n");
}

// Header values must not carry line breaks, or a handler's value could inject headers.
void append_header(std::string& out, std::string_view name, std::string_view value) {
  out.append(name);
  out.append(": ");
  for (char c : value) out.push_back(c == '\r' || c == '\n' ? ' ' : c);
  out.append("\r\n");
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, std::shared_ptr<ServerShared> shared)
      : strand_(socket.get_executor()),
        socket_(std::move(socket)),
        read_timer_(strand_),
        write_timer_(strand_),
        shared_(std::move(shared)) {
    shared_->stats.open_connections.fetch_add(1);
  }
  ~Session() {
    if (!closed_) shared_->stats.open_connections.fetch_sub(1);
  }

  void start() {
    net::dispatch(strand_, [self = shared_from_this()] {
      error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      auto ep = self->socket_.remote_endpoint(ignored);
      if (!ignored) self->remote_ = core::str_cat(ep.address().to_string(), ":", ep.port());
      self->phase_ = Phase::kIdle;
      self->arm_read_timer(self->shared_->limits.header_timeout);
      self->start_read();
    });
  }

  // Answers 503 and closes: the server is at its connection limit.
  void reject() {
    net::dispatch(strand_, [self = shared_from_this()] {
      self->phase_ = Phase::kClosing;
      self->keep_alive_ = false;
      self->close_after_write_ = true;
      self->queue(self->simple_response(503, "too many open connections", ""));
    });
  }

  // Drain: close when idle, otherwise after the current response.
  void drain() {
    net::dispatch(strand_, [self = shared_from_this()] {
      self->keep_alive_ = false;
      // A request may be on its way on this idle connection: end our side and drop what still
      // comes, so the client sees a clean close (and retries) instead of a connection reset.
      if (self->phase_ == Phase::kIdle && self->buffer_.size() == 0) self->lingering_close();
    });
  }

  void force_close() {
    net::dispatch(strand_, [self = shared_from_this()] { self->close(); });
  }

  // ---- called by Exchange, on the strand -------------------------------------------------------------
  void respond(Exchange* ex, int status, std::string content_type, std::string body, HeaderList extra) {
    if (!owns(ex) || response_started_) return;
    response_started_ = true;
    std::string out = head(status, content_type, extra);
    append_header(out, "Content-Length", std::to_string(body.size()));
    out.append("\r\n");
    if (!head_only_) out.append(body);  // a HEAD response has the head a GET would get, and no body
    response_done_ = true;
    queue(std::move(out));
  }

  void start_stream(Exchange* ex, int status, std::string content_type, HeaderList extra) {
    if (!owns(ex) || response_started_) return;
    response_started_ = true;
    chunked_ = version_ == 11;
    // HTTP/1.0: the end of the body is the end of the connection (a HEAD response has none).
    if (!chunked_ && !head_only_) keep_alive_ = false;
    std::string out = head(status, content_type, extra);
    if (chunked_) append_header(out, "Transfer-Encoding", "chunked");
    out.append("\r\n");
    queue(std::move(out));
  }

  void write_body(Exchange* ex, std::string data) {
    if (!owns(ex) || !response_started_ || response_done_ || data.empty() || head_only_) return;
    if (chunked_) {
      char size[24];
      int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      std::string framed;
      framed.reserve(data.size() + static_cast<size_t>(n) + 2);
      framed.append(size, static_cast<size_t>(n));
      framed.append(data);
      framed.append("\r\n");
      queue(std::move(framed));
    } else {
      queue(std::move(data));
    }
  }

  void end_stream(Exchange* ex) {
    if (!owns(ex) || !response_started_ || response_done_) return;
    response_done_ = true;
    queue(chunked_ && !head_only_ ? std::string("0\r\n\r\n") : std::string());
  }

  bool is_closed() const { return closed_; }

 private:
  enum class Phase { kIdle, kHead, kBody, kHandling, kClosing };

  bool owns(Exchange* ex) const { return !closed_ && exchange_ && exchange_.get() == ex; }

  std::string head(int status, std::string_view content_type, const HeaderList& extra) {
    std::string out = status_line(version_, status);
    out.append("Server: dsinfer\r\n");
    if (!content_type.empty()) append_header(out, "Content-Type", content_type);
    for (const auto& [k, v] : extra) append_header(out, k, v);
    if (!keep_alive_ || shared_->draining.load()) {
      keep_alive_ = false;
      out.append("Connection: close\r\n");
    } else if (version_ == 10) {
      out.append("Connection: keep-alive\r\n");
    }
    return out;
  }

  std::string simple_response(int status, std::string_view message, std::string_view path) {
    HttpServer::ErrorBody e{"text/plain", core::str_cat(message, "\n")};
    if (shared_->error_formatter) e = shared_->error_formatter(status, path, message);
    std::string out = status_line(11, status);
    out.append("Server: dsinfer\r\nConnection: close\r\n");
    append_header(out, "Content-Type", e.content_type);
    append_header(out, "Content-Length", std::to_string(e.body.size()));
    out.append("\r\n");
    out.append(e.body);
    return out;
  }

  // A protocol-level failure before any handler saw the request: answer and close.
  void fail_request(int status, std::string_view message) {
    shared_->stats.bad_requests_total.fetch_add(1);
    std::string path;
    if (parser_) {  // the request line is kept even when a later part of the head failed
      auto t = parser_->get().target();
      path = origin_form(std::string_view(t.data(), t.size()));
      path = path.substr(0, path.find('?'));
    }
    disarm_read_timer();
    phase_ = Phase::kClosing;
    keep_alive_ = false;
    close_after_write_ = true;
    queue(simple_response(status, message, path));
  }

  // ---- reading ---------------------------------------------------------------------------------------
  void arm_read_timer(std::chrono::milliseconds timeout) {
    read_timed_out_ = false;
    read_timer_.expires_after(timeout);
    read_timer_.async_wait([self = shared_from_this(), gen = ++read_timer_gen_](error_code ec) {
      if (ec || gen != self->read_timer_gen_ || self->closed_) return;
      self->read_timed_out_ = true;
      error_code ignored;
      self->socket_.cancel(ignored);  // the pending read completes with operation_aborted
    });
  }
  void disarm_read_timer() {
    ++read_timer_gen_;
    read_timer_.cancel();
  }

  // One read_some into the buffer. In kIdle it waits for the next request; while a request is in
  // flight it only watches for the client going away (and keeps pipelined bytes).
  void start_read() {
    if (reading_ || closed_) return;
    if (phase_ == Phase::kIdle && buffer_.size() > 0) {
      read_head();
      return;
    }
    if (phase_ == Phase::kHandling && buffer_.size() >= kMaxPipelinedBytes) return;  // stop watching
    reading_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      self->reading_ = false;
      self->on_read_some(ec, n);
    });
  }

  void on_read_some(error_code ec, size_t n) {
    if (closed_) return;
    if (!ec) buffer_.commit(n);
    if (phase_ == Phase::kIdle) {
      if (resume_after_cancel_ && ec == net::error::operation_aborted && !read_timed_out_) {
        resume_after_cancel_ = false;
        read_head();
        return;
      }
      if (ec) {
        if (read_timed_out_) shared_->stats.timeouts_total.fetch_add(1);
        close();  // idle keep-alive timeout, or the client closed between requests
        return;
      }
      read_head();
      return;
    }
    if (phase_ == Phase::kHandling) {
      if (ec) {
        client_gone();
        return;
      }
      start_read();
      return;
    }
    if (lingering_ && !ec) {
      buffer_.consume(buffer_.size());
      discard_read();
      return;
    }
    close();  // kClosing: nothing more to read
  }

  void read_head() {
    phase_ = Phase::kHead;
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(shared_->limits.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(shared_->limits.max_body_bytes));
    arm_read_timer(shared_->limits.header_timeout);
    reading_ = true;
    http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      self->reading_ = false;
      self->on_head(ec);
    });
  }

  bool read_error(error_code ec) {
    if (!ec) return false;
    if (closed_) return true;
    if (read_timed_out_) {
      shared_->stats.timeouts_total.fetch_add(1);
      fail_request(408, "the request did not arrive in time");
    } else if (ec == http::error::body_limit) {
      fail_request(413, core::str_cat("request body larger than the limit of ", shared_->limits.max_body_bytes, " bytes"));
    } else if (ec == http::error::header_limit) {
      fail_request(431, core::str_cat("request head larger than the limit of ", shared_->limits.max_header_bytes, " bytes"));
    } else if (ec == http::error::end_of_stream || ec == net::error::eof ||
               ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      close();
    } else {
      fail_request(400, core::str_cat("malformed HTTP request: ", ec.message()));
    }
    return true;
  }

  void on_head(error_code ec) {
    if (read_error(ec)) return;
    auto& h = parser_->get();
    version_ = h.version() == 10 ? 10 : 11;
    if (auto bad = check_head(*parser_, shared_->limits.max_body_bytes); bad.status != 0) {
      fail_request(bad.status, bad.message);
      return;
    }
    phase_ = Phase::kBody;
    disarm_read_timer();
    arm_read_timer(shared_->limits.body_timeout);
    auto expect = h[http::field::expect];
    if (!parser_->is_done() && !expect.empty()) {
      if (lower(expect) != "100-continue") {
        fail_request(417, "unsupported Expect header");
        return;
      }
      queue("HTTP/1.1 100 Continue\r\n\r\n");
    }
    read_body();
  }

  // The body is fed to the parser here (feed_body) rather than by http::async_read, which keeps
  // reading until an element (a chunk-size line, the trailer section) is complete, however long it
  // gets, and counts only the payload against body_limit.
  void read_body() {
    body_wire_bytes_ = 0;
    parse_body();
  }

  void parse_body() {
    ParseFailure failure;
    if (feed_body(*parser_, buffer_, shared_->limits.max_body_bytes, body_wire_bytes_, failure)) {
      on_body();
      return;
    }
    if (failure.status != 0) {
      fail_request(failure.status, failure.message);
      return;
    }
    reading_ = true;
    socket_.async_read_some(buffer_.prepare(kBodyReadBytes), [self = shared_from_this()](error_code ec, size_t n) {
      self->reading_ = false;
      if (self->closed_) return;
      if (!ec) self->buffer_.commit(n);
      if (ec == net::error::eof) ec = http::error::end_of_stream;
      if (self->read_error(ec)) return;
      self->parse_body();
    });
  }

  void on_body() {
    disarm_read_timer();
    auto msg = parser_->release();
    parser_.reset();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = origin_form(std::string_view(msg.target().data(), msg.target().size()));
    req.path = req.target.substr(0, req.target.find('?'));
    req.version = version_;
    head_only_ = req.method == "HEAD";
    for (const auto& f : msg) req.headers.emplace_back(lower(f.name_string()), std::string(f.value()));
    req.body = std::move(msg.body());
    req.remote = remote_;
    req.received = std::chrono::steady_clock::now();
    keep_alive_ = msg.keep_alive() && !shared_->draining.load();

    phase_ = Phase::kHandling;
    response_started_ = response_done_ = chunked_ = false;
    exchange_ = std::make_shared<Exchange>(shared_from_this(), std::move(req), strand_);
    shared_->stats.in_flight.fetch_add(1);
    start_read();  // watch for the client leaving while the handler works
    auto ex = exchange_;
    try {
      shared_->handler(ex);
    } catch (const std::exception& e) {
      DSINFER_LOG_ERROR("server: handler failed on ", ex->request().target, ": ", e.what());
      if (owns(ex.get()) && !response_started_)
        respond(ex.get(), 500, "text/plain", "internal error\n", {});
      else if (owns(ex.get()))
        close();
    }
  }

  // ---- writing ---------------------------------------------------------------------------------------
  void queue(std::string data) {
    if (closed_) return;
    out_pending_.append(data);
    if (out_pending_.size() > shared_->limits.max_buffered_bytes) {
      DSINFER_LOG_WARN("server: dropping ", remote_, ": client reads too slowly (",
                       out_pending_.size(), " bytes queued)");
      client_gone();
      return;
    }
    if (!writing_) do_write();
  }

  void do_write() {
    if (out_pending_.empty()) {
      after_writes();
      return;
    }
    writing_ = true;
    std::swap(out_writing_, out_pending_);
    out_pending_.clear();
    write_timer_.expires_after(shared_->limits.write_timeout);
    write_timer_.async_wait([self = shared_from_this(), gen = ++write_gen_](error_code ec) {
      if (ec || gen != self->write_gen_ || self->closed_) return;
      self->shared_->stats.timeouts_total.fetch_add(1);
      DSINFER_LOG_WARN("server: dropping ", self->remote_, ": write stalled");
      self->client_gone();
    });
    net::async_write(socket_, net::buffer(out_writing_), [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      ++self->write_gen_;
      self->write_timer_.cancel();
      self->out_writing_.clear();
      if (self->closed_) return;
      if (ec) {
        self->client_gone();
        return;
      }
      self->do_write();
    });
  }

  // Everything queued so far is on the wire.
  void after_writes() {
    if (close_after_write_) {
      lingering_close();
      return;
    }
    if (phase_ != Phase::kHandling || !response_done_) return;
    end_exchange();
    if (!keep_alive_) {
      graceful_close();
      return;
    }
    phase_ = Phase::kIdle;
    if (reading_) {
      if (buffer_.size() > 0) {  // a pipelined request is here: stop the watch read and parse it
        resume_after_cancel_ = true;
        error_code ignored;
        socket_.cancel(ignored);
      } else {
        arm_read_timer(shared_->limits.idle_timeout);
      }
      return;
    }
    arm_read_timer(shared_->limits.idle_timeout);
    start_read();
  }

  void end_exchange() {
    exchange_->release();
    exchange_.reset();
    shared_->stats.in_flight.fetch_sub(1);
    std::lock_guard lock(shared_->idle_mu);
    shared_->idle_cv.notify_all();
  }

  // ---- closing ---------------------------------------------------------------------------------------
  void client_gone() { close(); }

  void graceful_close() {
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    close();
  }

  // After an error answered before the request was read (413, 408, ...), the client may still be
  // sending: closing at once would reset the connection and the client would never read the answer.
  // So: end our side, then read and drop what still comes for a while before closing.
  void lingering_close() {
    if (closed_ || lingering_) return;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    phase_ = Phase::kClosing;
    lingering_ = true;
    arm_read_timer(kLingerTime);
    if (reading_) return;  // its handler goes on with discard_read()
    discard_read();
  }

  void discard_read() {
    discard_.resize(16 * 1024);
    reading_ = true;
    socket_.async_read_some(net::buffer(discard_), [self = shared_from_this()](error_code ec, size_t n) {
      self->reading_ = false;
      self->discarded_ += n;
      if (ec || self->closed_ || self->discarded_ > kMaxLingerBytes) {
        self->close();
        return;
      }
      self->discard_read();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    shared_->stats.open_connections.fetch_sub(1);
    phase_ = Phase::kClosing;
    disarm_read_timer();
    ++write_gen_;
    write_timer_.cancel();
    error_code ignored;
    socket_.close(ignored);
    if (exchange_) {  // the response was not completely sent
      auto ex = exchange_;
      ex->notify_disconnect();
      end_exchange();
    }
  }

  static constexpr size_t kMaxPipelinedBytes = 64u << 10;
  static constexpr size_t kBodyReadBytes = 64u << 10;
  static constexpr std::chrono::milliseconds kLingerTime{5000};
  static constexpr size_t kMaxLingerBytes = 64u << 20;

  net::any_io_executor strand_;
  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  std::shared_ptr<ServerShared> shared_;
  std::string remote_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<Exchange> exchange_;
  Phase phase_ = Phase::kIdle;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool response_started_ = false;
  bool response_done_ = false;
  bool chunked_ = false;
  bool head_only_ = false;  // the request is a HEAD: responses carry no body
  bool close_after_write_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool lingering_ = false;  // our side is shut; reads are dropped until the client closes
  bool read_timed_out_ = false;
  bool resume_after_cancel_ = false;
  uint64_t read_timer_gen_ = 0;
  uint64_t write_gen_ = 0;
  std::string out_pending_;
  std::string out_writing_;
  std::string discard_;
  size_t discarded_ = 0;
  size_t body_wire_bytes_ = 0;  // bytes of the current body parsed, chunk framing included
};

// ---------------------------------------------------------------------------------------------------
Exchange::Exchange(std::shared_ptr<Session> session, HttpRequest request, net::any_io_executor strand)
    : session_(std::move(session)), request_(std::move(request)), strand_(std::move(strand)) {}

// The posted work holds the exchange itself: whoever called may drop the last reference before it runs.
void Exchange::respond(int status, std::string content_type, std::string body, HeaderList extra) {
  net::dispatch(strand_, [s = session_, self = shared_from_this(), status, ct = std::move(content_type),
                          b = std::move(body), e = std::move(extra)]() mutable {
    s->respond(self.get(), status, std::move(ct), std::move(b), std::move(e));
  });
}

void Exchange::start_stream(int status, std::string content_type, HeaderList extra) {
  net::dispatch(strand_, [s = session_, self = shared_from_this(), status, ct = std::move(content_type),
                          e = std::move(extra)]() mutable {
    s->start_stream(self.get(), status, std::move(ct), std::move(e));
  });
}

void Exchange::write(std::string data) {
  net::dispatch(strand_, [s = session_, self = shared_from_this(), d = std::move(data)]() mutable {
    s->write_body(self.get(), std::move(d));
  });
}

void Exchange::end_stream() {
  net::dispatch(strand_, [s = session_, self = shared_from_this()] { s->end_stream(self.get()); });
}

void Exchange::on_disconnect(std::function<void()> fn) {
  net::dispatch(strand_, [self = shared_from_this(), fn = std::move(fn)]() mutable {
    if (self->disconnect_fired_) {
      fn();
    } else if (!self->released_) {
      self->on_disconnect_ = std::move(fn);
    }
  });
}

std::string Exchange::take_body() {
  std::string body = std::move(request_.body);
  request_.body = std::string();  // a moved-from string's state is unspecified: leave none behind
  return body;
}

void Exchange::notify_disconnect() {
  if (disconnect_fired_ || released_) return;
  disconnect_fired_ = true;
  disconnected_.store(true, std::memory_order_release);
  if (on_disconnect_) {
    auto fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    fn();
  }
}

void Exchange::release() {
  released_ = true;
  on_disconnect_ = nullptr;  // it may hold what holds this exchange
}

// ---------------------------------------------------------------------------------------------------
HttpServer::HttpServer(HttpLimits limits, Handler handler, ErrorFormatter error_formatter)
    : shared_(std::make_shared<ServerShared>()),
      accept_strand_(net::make_strand(ioc_)),
      acceptor_(accept_strand_) {
  shared_->limits = limits;
  shared_->handler = std::move(handler);
  shared_->error_formatter = std::move(error_formatter);
}

HttpServer::~HttpServer() { stop(); }

bool HttpServer::draining() const { return shared_->draining.load(); }
const HttpServerStats& HttpServer::stats() const { return shared_->stats; }
const HttpLimits& HttpServer::limits() const { return shared_->limits; }

void HttpServer::listen(const std::string& host, uint16_t port) {
  error_code ec;
  tcp::resolver resolver(ioc_);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  DSINFER_CHECK(!ec && !results.empty(), "server: cannot resolve host '", host, "': ", ec.message());
  tcp::endpoint ep = results.begin()->endpoint();
  acceptor_.open(ep.protocol(), ec);
  DSINFER_CHECK(!ec, "server: cannot open socket: ", ec.message());
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  acceptor_.bind(ep, ec);
  DSINFER_CHECK(!ec, "server: cannot bind ", host, ":", port, ": ", ec.message());
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  DSINFER_CHECK(!ec, "server: cannot listen on ", host, ":", port, ": ", ec.message());
  port_ = acceptor_.local_endpoint().port();
}

// Every connection takes a descriptor. With a process limit below the connection cap, accept() fails
// (EMFILE) before the cap is reached and the clients over it wait unanswered instead of getting 503.
// So the soft limit is raised toward the hard one, and where that is not enough the cap is lowered.
void HttpServer::fit_connection_cap() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  std::error_code ec;
  size_t open = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) ++open;
  size_t& cap = shared_->limits.max_connections;
  const rlim_t needed = static_cast<rlim_t>(open + kSpareDescriptors + cap);
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? needed : std::min(needed, rl.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < needed) {
    const size_t usable = static_cast<size_t>(rl.rlim_cur);
    const size_t fit = usable > open + kSpareDescriptors ? usable - open - kSpareDescriptors : 1;
    DSINFER_LOG_WARN("server: the open-file limit (", rl.rlim_cur, ", hard ", rl.rlim_max, ") is too low for ", cap,
                     " connections; serving at most ", fit, " (raise it with ulimit -n)");
    cap = fit;
  }
}

void HttpServer::start(int io_threads) {
  DSINFER_CHECK(acceptor_.is_open(), "server: start() before listen()");
  DSINFER_CHECK(threads_.empty(), "server: started twice");
  fit_connection_cap();
  work_guard_.emplace(ioc_.get_executor());
  net::dispatch(accept_strand_, [this] { do_accept(); });
  for (int i = 0; i < std::max(1, io_threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors or similar: wait a little instead of spinning on the error.
      DSINFER_LOG_WARN("server: accept failed: ", ec.message());
      if (!accept_retry_) accept_retry_ = std::make_unique<net::steady_timer>(accept_strand_);
      accept_retry_->expires_after(std::chrono::milliseconds(50));
      accept_retry_->async_wait([this](error_code tec) {
        if (!tec && acceptor_.is_open()) do_accept();
      });
      return;
    }
    auto& st = shared_->stats;
    st.accepted_total.fetch_add(1);
    auto session = std::make_shared<Session>(std::move(socket), shared_);
    if (static_cast<size_t>(st.open_connections.load()) > shared_->limits.max_connections) {
      st.rejected_connections_total.fetch_add(1);
      session->reject();
    } else {
      std::lock_guard lock(sessions_mu_);
      if (sessions_.size() >= 64 && sessions_.size() % 64 == 0)
        sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                       [](const std::weak_ptr<Session>& w) { return w.expired(); }),
                        sessions_.end());
      sessions_.push_back(session);
      session->start();
    }
    do_accept();
  });
}

template <typename F>
void HttpServer::for_each_session(F&& fn) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(sessions_mu_);
    for (auto& w : sessions_)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) fn(*s);
}

// The listener stays open: a load balancer's health check must still get its answer (503 from the
// handler) while the in-flight requests finish. Every response from now on closes its connection.
void HttpServer::begin_drain() {
  shared_->draining.store(true);
  for_each_session([](Session& s) { s.drain(); });
}

bool HttpServer::wait_no_exchanges(std::chrono::milliseconds timeout) {
  std::unique_lock lock(shared_->idle_mu);
  return shared_->idle_cv.wait_for(lock, timeout, [&] { return shared_->stats.in_flight.load() == 0; });
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (threads_.empty()) {
    error_code ignored;
    acceptor_.close(ignored);
    return;
  }
  begin_drain();
  std::promise<void> closed;
  net::dispatch(accept_strand_, [this, &closed] {
    error_code ignored;
    acceptor_.close(ignored);
    if (accept_retry_) accept_retry_->cancel();
    closed.set_value();
  });
  closed.get_future().wait();  // no session is accepted after the ones closed here
  for_each_session([](Session& s) { s.force_close(); });
  // Let the closes run (they notify in-flight exchanges) before the io threads stop.
  for (int i = 0; i < 200 && shared_->stats.open_connections.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  work_guard_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

}  // namespace dsinfer::server
