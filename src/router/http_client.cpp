#include "router/http_client.h"

#include <sys/socket.h>

#include <condition_variable>
#include <limits>
#include <optional>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"

namespace dsinfer::router {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

HttpUrl parse_http_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  DSINFER_CHECK(url.rfind(kScheme, 0) == 0, "not an http:// URL: '", url, "'");
  std::string rest = url.substr(kScheme.size());
  HttpUrl out;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    rest.resize(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
  }
  size_t colon;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    DSINFER_CHECK(close != std::string::npos, "bad IPv6 host in '", url, "'");
    out.host = rest.substr(1, close - 1);
    colon = rest.find(':', close);
  } else {
    colon = rest.rfind(':');
    out.host = rest.substr(0, colon);
  }
  out.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  DSINFER_CHECK(!out.host.empty() && !out.port.empty() &&
                    out.port.find_first_not_of("0123456789") == std::string::npos,
                "bad host or port in '", url, "'");
  return out;
}

struct HttpCall::State {
  asio::io_context io;
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  mutable std::mutex mu;  // guards the socket's descriptor against cancel() while it opens or closes
  bool cancelled = false;
  bool open = false;
};

HttpCall::HttpCall() : s_(std::make_unique<State>()) {}

HttpCall::~HttpCall() {
  std::lock_guard<std::mutex> lock(s_->mu);
  boost::system::error_code ec;
  s_->socket.close(ec);
}

void HttpCall::cancel() {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->cancelled = true;
  // shutdown(2) on the descriptor wakes a read blocked in another thread; close() would race with it.
  if (s_->open) ::shutdown(s_->socket.native_handle(), SHUT_RDWR);
}

bool HttpCall::cancelled() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->cancelled;
}

int HttpCall::request(const HttpUrl& url, const std::string& method, const std::string& path, const std::string& body,
                      const std::string& api_key) {
  boost::system::error_code ec;
  tcp::resolver resolver(s_->io);
  const auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec) throw TransportError("cannot resolve " + url.host + ": " + ec.message());
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    if (s_->cancelled) throw TransportError("cancelled");
    s_->socket.open(endpoints.begin()->endpoint().protocol(), ec);
    if (ec) throw TransportError("socket: " + ec.message());
    s_->open = true;
  }
  s_->socket.connect(*endpoints.begin(), ec);
  if (ec) throw TransportError("cannot connect to " + url.host + ":" + url.port + ": " + ec.message());
  s_->socket.set_option(tcp::no_delay(true), ec);
  http::request<http::string_body> req{http::string_to_verb(method), url.base_path + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::connection, "close");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  http::write(s_->socket, req, ec);
  if (ec || cancelled()) throw TransportError("sending to " + url.host + ":" + url.port + ": " + ec.message());
  s_->parser.emplace();
  // A number, not boost::none: Beast 1.74 compares the length against the optional, and none loses.
  s_->parser->body_limit(std::numeric_limits<std::uint64_t>::max());
  http::read_header(s_->socket, s_->buffer, *s_->parser, ec);
  if (ec || cancelled())
    throw TransportError("no response from " + url.host + ":" + url.port + ": " + (ec ? ec.message() : "cancelled"));
  return static_cast<int>(s_->parser->get().result_int());
}

bool HttpCall::read_some(std::string& out) {
  DSINFER_CHECK(s_->parser.has_value(), "HttpCall::read_some before request");
  auto& p = *s_->parser;
  if (p.is_done()) return false;
  char chunk[16384];
  p.get().body().data = chunk;
  p.get().body().size = sizeof chunk;
  boost::system::error_code ec;
  http::read_some(s_->socket, s_->buffer, p, ec);
  if (ec == http::error::need_buffer) ec = {};
  if (ec || cancelled()) throw TransportError("response cut: " + (ec ? ec.message() : std::string("cancelled")));
  out.append(chunk, sizeof chunk - p.get().body().size);
  return true;  // the next call says whether more came
}

std::string HttpCall::read_all() {
  std::string out;
  while (read_some(out)) {
  }
  return out;
}

HttpReply http_exchange(const HttpUrl& url, const std::string& method, const std::string& path,
                        const std::string& body, const std::string& api_key, std::chrono::milliseconds timeout) {
  HttpCall call;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  // Blocking socket calls have no deadline of their own: a watchdog cancels the call when time is up.
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, timeout, [&] { return done; })) call.cancel();
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    watchdog.join();
  };
  HttpReply reply;
  try {
    reply.status = call.request(url, method, path, body, api_key);
    reply.body = call.read_all();
  } catch (...) {
    finish();
    throw;
  }
  finish();
  return reply;
}

}  // namespace dsinfer::router
