// The request-parsing rules of HttpServer apart from its sockets, so that a fuzzer can drive exactly
// what the server runs: the checks on a parsed head (version, Host, body framing, declared size) and
// the bounded feeding of body bytes into Beast's parser.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

// GCC 12 reports a boost::optional inside Beast's parser as maybe-uninitialized at -O1/-O2 (a false
// positive in Boost's header).
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#pragma GCC diagnostic pop

namespace dsinfer::server {

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Why a request is refused before any handler sees it; status 0: it is not.
struct ParseFailure {
  int status = 0;
  std::string message;
};

// Limits on what waits unparsed in a chunked body: one chunk-size line with its extensions, and the
// trailer section after the last chunk. Chunk framing as a whole (sizes, extensions, line ends,
// trailers) may not exceed max_body_bytes + kMaxTrailerBytes.
inline constexpr size_t kMaxChunkLineBytes = 4u << 10;
inline constexpr size_t kMaxTrailerBytes = 8u << 10;

// Checks a complete head: HTTP/1.0 or 1.1 (505), one Host on 1.1 and at most one on 1.0 (400), a
// framing no intermediary can read differently (RFC 9112 §6.1, §6.3: Transfer-Encoding only on 1.1,
// never with Content-Length, ending in chunked, chunked once: else 400; other codings before chunked:
// 501), a declared Content-Length within max_body_bytes (413).
ParseFailure check_head(const RequestParser& parser, size_t max_body_bytes);

// Parses what `buffer` holds of the body into `parser` (head done, body_limit set), consuming it;
// `wire_bytes` counts the body's bytes as sent. True when the body is complete (what follows in the
// buffer is the next request). False when more bytes are needed, or with `failure` set when the
// request must be refused: malformed (400), over the body limit (413), a chunk-size line, trailer
// section or chunk framing over the limits above (400).
bool feed_body(RequestParser& parser, boost::beast::flat_buffer& buffer, size_t max_body_bytes, size_t& wire_bytes,
               ParseFailure& failure);

// A request target in origin form (path and query): an absolute-form target ("http://host/path?q",
// RFC 9112 §3.2.2, what a client talking to a proxy sends) loses its scheme and authority.
std::string origin_form(std::string_view target);

}  // namespace dsinfer::server
