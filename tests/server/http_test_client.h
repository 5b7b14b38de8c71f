// A blocking HTTP client for server tests: raw bytes in, parsed responses out, with a receive timeout
// so that a server bug fails the test instead of hanging it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

// GCC 12 warns about an optional inside Beast's response parser at -O2 (a false positive in Boost).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#pragma GCC diagnostic pop
#include <sys/socket.h>
#include <sys/time.h>

namespace dsinfer::server::testing {

class TestClient {
 public:
  explicit TestClient(uint16_t port, int timeout_seconds = 20) : socket_(ioc_) {
    boost::asio::ip::tcp::endpoint ep(boost::asio::ip::make_address("127.0.0.1"), port);
    socket_.connect(ep);
    timeval tv{timeout_seconds, 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }

  void send(const std::string& bytes) { boost::asio::write(socket_, boost::asio::buffer(bytes)); }
  // Sends, ignoring a peer that closed early (the server may answer 413 before the body is sent).
  bool try_send(const std::string& bytes) {
    boost::system::error_code ec;
    boost::asio::write(socket_, boost::asio::buffer(bytes), ec);
    return !ec;
  }

  // Reads one response; the status is 0 and error set if none could be read. `to_head`: the response
  // answers a HEAD request, so it has no body whatever its headers say.
  boost::beast::http::response<boost::beast::http::string_body> read_response(boost::system::error_code* error = nullptr,
                                                                              bool to_head = false) {
    boost::beast::http::response_parser<boost::beast::http::string_body> parser;
    parser.body_limit(1u << 30);
    parser.skip(to_head);
    boost::system::error_code ec;
    boost::beast::http::read(socket_, buffer_, parser, ec);
    if (error) *error = ec;
    if (ec) return {};
    return parser.release();
  }

  // True when the server closed the connection (EOF or reset) within the receive timeout.
  bool closed_by_peer() {
    if (buffer_.size() > 0) return false;
    char c;
    boost::system::error_code ec;
    size_t n = socket_.read_some(boost::asio::buffer(&c, 1), ec);
    return n == 0 && (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset);
  }

  // Everything until the server closes.
  std::string read_until_close() {
    std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    buffer_.consume(buffer_.size());
    char chunk[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = socket_.read_some(boost::asio::buffer(chunk), ec);
      out.append(chunk, n);
      if (ec) break;
    }
    return out;
  }

  void close() {
    boost::system::error_code ec;
    socket_.close(ec);
  }
  boost::asio::ip::tcp::socket& socket() { return socket_; }

 private:
  boost::asio::io_context ioc_;
  boost::asio::ip::tcp::socket socket_;
  boost::beast::flat_buffer buffer_;
};

inline std::string http_request(const std::string& method, const std::string& target, const std::string& body = "",
                                const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n" + extra_headers;
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "\r\n" + body;
  return r;
}

}  // namespace dsinfer::server::testing
