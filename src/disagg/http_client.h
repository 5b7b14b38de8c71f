// A small blocking HTTP/1.1 client for the cluster's control messages (a worker's heartbeats to the
// router): one request per connection, a deadline on the whole exchange. Not for the data path.
#pragma once

#include <chrono>
#include <string>

namespace dsinfer::disagg {

struct HttpUrl {
  std::string host;
  std::string port = "80";
  std::string base;  // path prefix without a trailing '/', e.g. "" or "/cluster"
};
// "http://host:port[/base]" (IPv6 hosts in brackets); throws core::Error (invalid input) otherwise.
HttpUrl parse_http_url(const std::string& url);

struct HttpReply {
  int status = 0;
  std::string body;
};
// POSTs `body` as application/json to base + path; with api_key, as 'Authorization: Bearer'. Throws on
// connection failure or timeout.
HttpReply http_post_json(const HttpUrl& url, const std::string& path, const std::string& body,
                         const std::string& api_key, std::chrono::milliseconds timeout);

}  // namespace dsinfer::disagg
