// The cluster's one blocking HTTP/1.1 client (Boost.Beast): the router's traffic to its workers, the
// workers' heartbeats to the router, `dsinfer cluster` waiting for its router. One connection per call,
// run on the caller's thread. cancel() from any other thread shuts the socket down, so a call blocked
// reading a worker that died, hangs or was dropped from the pool returns at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

namespace dsinfer::router {

// The worker could not be reached or the connection broke (as opposed to an HTTP error status).
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HttpUrl {
  std::string host;
  std::string port;
  std::string base_path;  // without a trailing '/'
};
// "http://host:port[/base]" (IPv6 hosts in brackets); fails with core::Error on anything else.
HttpUrl parse_http_url(const std::string& url);

class HttpCall {
 public:
  HttpCall();
  ~HttpCall();
  HttpCall(const HttpCall&) = delete;
  HttpCall& operator=(const HttpCall&) = delete;

  // Connects, sends `method path` with a JSON body (none when empty) and reads the response head;
  // returns the status. Throws TransportError when the connection fails or was cancelled.
  int request(const HttpUrl& url, const std::string& method, const std::string& path, const std::string& body,
              const std::string& api_key);
  // The next piece of the body, appended to `out`; false once the body is complete. Throws TransportError
  // when the connection breaks (or was cancelled) before the body's end.
  bool read_some(std::string& out);
  std::string read_all();
  // Thread-safe; the call's blocking operations fail with TransportError from now on.
  void cancel();
  bool cancelled() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

struct HttpReply {
  int status = 0;
  std::string body;
};
// One whole exchange (a control message, not a stream) that gives up after `timeout`: the call is
// cancelled then. Throws TransportError when the server cannot be reached, breaks off or is too slow.
HttpReply http_exchange(const HttpUrl& url, const std::string& method, const std::string& path,
                        const std::string& body, const std::string& api_key, std::chrono::milliseconds timeout);

}  // namespace dsinfer::router
