#include "disagg/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "core/error.h"

namespace dsinfer::disagg {

namespace beast = boost::beast;
namespace http = boost::beast::http;

HttpUrl parse_http_url(const std::string& url) {
  const std::string scheme = "http://";
  DSINFER_CHECK(url.rfind(scheme, 0) == 0, "URL '", url, "' must start with http://");
  std::string rest = url.substr(scheme.size());
  HttpUrl out;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) out.base = rest.substr(slash);
  while (!out.base.empty() && out.base.back() == '/') out.base.pop_back();
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    DSINFER_CHECK(close != std::string::npos, "URL '", url, "': unclosed '[' in the host");
    out.host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      DSINFER_CHECK(authority[close + 1] == ':', "URL '", url, "': expected ':' after the host");
      out.port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) out.port = authority.substr(colon + 1);
  }
  DSINFER_CHECK(!out.host.empty() && !out.port.empty(), "URL '", url, "' has no host or port");
  return out;
}

HttpReply http_post_json(const HttpUrl& url, const std::string& path, const std::string& body,
                         const std::string& api_key, std::chrono::milliseconds timeout) {
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(timeout);
  boost::asio::ip::tcp::resolver resolver(io);
  stream.connect(resolver.resolve(url.host, url.port));
  http::request<http::string_body> req{http::verb::post, url.base + path, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::content_type, "application/json");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  req.keep_alive(false);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return {static_cast<int>(res.result_int()), res.body()};
}

}  // namespace dsinfer::disagg
