// An asynchronous HTTP/1.1 server on Boost.Beast/Asio: a few io threads serve any number of connections,
// each on its own strand. The server knows nothing about the API: a handler receives every complete
// request as an Exchange and answers it, at once or later, from any thread, with a full response or a
// chunked stream. While a request is in flight the connection keeps reading, so a client that goes away
// is noticed at once and the Exchange's disconnect callback fires (the API layer cancels the request).
// Hardening: limits on header and body size (431/413), on chunk-size lines, trailers and chunk
// framing (400), unambiguous framing (Transfer-Encoding ending in chunked, never with Content-Length:
// 400 and close; other codings 501), exactly one Host on HTTP/1.1, a deadline for a request's head
// and body once it has started (408, against slow clients), an idle keep-alive timeout, a stall
// timeout on writes (a client that stops reading is dropped), a cap on bytes buffered for a slow
// reader, and a cap on open connections (503) that fits the process's open-file limit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

namespace dsinfer::server {

struct HttpLimits {
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 16u << 10;
  std::chrono::milliseconds header_timeout{10'000};  // from a request's first byte to its complete head
  std::chrono::milliseconds body_timeout{60'000};    // from the head to the complete body
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive wait for the next request
  std::chrono::milliseconds write_timeout{60'000};   // one write making no progress for this long
  size_t max_buffered_bytes = 16u << 20;             // response bytes queued for a slow reader
  size_t max_connections = 16384;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // as sent, e.g. "POST"
  std::string target;  // path and query (an absolute-form target loses its scheme and authority)
  std::string path;    // target without the query
  unsigned version = 11;  // 10 or 11
  HeaderList headers;  // names in lower case, in the order sent
  std::string body;
  std::string remote;  // peer address "ip:port"
  std::chrono::steady_clock::time_point received;  // when the request was complete

  // The first header of that (lower-case) name, or empty.
  std::string_view header(std::string_view lower_name) const;
  bool has_header(std::string_view lower_name) const;
};

class Session;
struct ServerShared;

// One request and its response. Every method may be called from any thread; after the client has gone
// (or the response has ended) the sending methods do nothing.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<Session> session, HttpRequest request, boost::asio::any_io_executor strand);
  const HttpRequest& request() const { return request_; }
  // Moves the body out, so that its storage goes with the caller's copy (the request may be parsed
  // long before its response ends). For the one thread handling the request; request().body is empty
  // afterwards.
  std::string take_body();
  // The connection's strand: handlers post work here to run it in order with this exchange's I/O.
  const boost::asio::any_io_executor& executor() const { return strand_; }

  // A complete response with Content-Length.
  void respond(int status, std::string content_type, std::string body, HeaderList extra = {});
  // A streamed response (chunked on HTTP/1.1): the head now, then write() pieces, then end_stream().
  void start_stream(int status, std::string content_type, HeaderList extra = {});
  void write(std::string data);
  void end_stream();

  // Called once, on the strand, if the client disconnects (or the connection is dropped: write stall,
  // too many buffered bytes, forced shutdown) before the response has been sent completely. Set it
  // before submitting work whose cancellation it triggers; if the client is already gone it runs at once.
  void on_disconnect(std::function<void()> fn);
  bool disconnected() const { return disconnected_.load(std::memory_order_acquire); }

 private:
  friend class Session;
  void notify_disconnect();  // on the strand: the client left before the response was complete
  void release();            // on the strand: the response was sent; drop the callback

  const std::shared_ptr<Session> session_;  // never reset: other threads read it
  HttpRequest request_;
  boost::asio::any_io_executor strand_;
  std::function<void()> on_disconnect_;  // strand only
  bool disconnect_fired_ = false;       // strand only
  bool released_ = false;               // strand only
  std::atomic<bool> disconnected_{false};
};

struct HttpServerStats {
  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> accepted_total{0};
  std::atomic<int64_t> rejected_connections_total{0};  // over max_connections
  std::atomic<int64_t> timeouts_total{0};              // 408 sent or idle/stalled connection dropped
  std::atomic<int64_t> bad_requests_total{0};          // unparsable, 413, 431
  std::atomic<int64_t> in_flight{0};                   // exchanges not finished
};

class HttpServer {
 public:
  using Handler = std::function<void(std::shared_ptr<Exchange>)>;
  struct ErrorBody {
    std::string content_type;
    std::string body;
  };
  // Formats the errors the HTTP layer answers by itself (400, 408, 413, 417, 431, 501, 505, 503 at the
  // connection cap) for the protocol the path belongs to; `path` is empty when the head was unreadable.
  using ErrorFormatter = std::function<ErrorBody(int status, std::string_view path, std::string_view message)>;

  HttpServer(HttpLimits limits, Handler handler, ErrorFormatter error_formatter = nullptr);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; host is a name or address, port 0 picks a free one. Fails with core::Error.
  void listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  // Starts the io threads and accepting; returns at once. First fits the connection cap to the
  // process's open-file limit: raises the soft limit if it can, else lowers the cap (with a warning).
  void start(int io_threads);
  // Closes idle keep-alive connections and marks the others to close after their current response;
  // connections still arriving are served one request each (the handler sees draining()). In-flight
  // exchanges continue.
  void begin_drain();
  bool draining() const;
  // Waits until no exchange is in flight or the timeout passes; true when none is left.
  bool wait_no_exchanges(std::chrono::milliseconds timeout);
  // Stops accepting, closes every connection (in-flight exchanges see a disconnect), stops the io
  // threads and joins them. Whoever still holds an Exchange must be done with it before the server is
  // destroyed.
  void stop();

  const HttpServerStats& stats() const;
  const HttpLimits& limits() const;

  // Descriptors kept free besides the connections: the listener, files, the engine, connections over
  // the cap that are being answered 503.
  static constexpr size_t kSpareDescriptors = 32;

 private:
  void fit_connection_cap();
  void do_accept();
  template <typename F>
  void for_each_session(F&& fn);

  boost::asio::io_context ioc_;
  std::shared_ptr<ServerShared> shared_;
  boost::asio::any_io_executor accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::unique_ptr<boost::asio::steady_timer> accept_retry_;
  std::vector<std::thread> threads_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_guard_;
  uint16_t port_ = 0;
  bool stopped_ = false;
  std::mutex sessions_mu_;
  std::vector<std::weak_ptr<Session>> sessions_;  // compacted as connections arrive
};

}  // namespace dsinfer::server
