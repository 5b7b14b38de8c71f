// libFuzzer target for the server's request parsing (server/http_request_parser.h: the head checks and
// the bounded body feeding HttpServer runs on every request, over Beast's parser). The first two input
// bytes pick the body limit and the size of the pieces the rest arrives in; the rest is the bytes a
// client sends. Nothing may crash, hang or grow without bound, and:
//   - a head that passes check_head is HTTP/1.0 or 1.1, has one Host on 1.1, never Transfer-Encoding
//     with Content-Length;
//   - between pieces, what waits unparsed stays within the chunk-line / trailer caps;
//   - a complete body is within the limit, and the same bytes in one piece give the same body.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "server/http_request_parser.h"

using namespace dsinfer::server;
namespace http = boost::beast::http;

namespace {

#define FUZZ_CHECK(cond)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "http_fuzz: check failed: %s\n", #cond);      \
      __builtin_trap();                                                  \
    }                                                                    \
  } while (0)

struct Outcome {
  bool done = false;  // a complete request
  int status = 0;     // refused with this status
  std::string body;
};

Outcome parse(std::string_view input, size_t max_body, size_t piece) {
  Outcome out;
  RequestParser parser;
  parser.header_limit(4096);
  parser.body_limit(max_body);
  boost::beast::flat_buffer buffer;
  size_t pos = 0;
  auto next = [&] {
    const size_t n = std::min(piece, input.size() - pos);
    if (n == 0) return false;
    auto b = buffer.prepare(n);
    std::memcpy(b.data(), input.data() + pos, n);
    buffer.commit(n);
    pos += n;
    return true;
  };
  while (!parser.is_header_done()) {
    if (!next()) return out;  // the input ended inside the head
    boost::system::error_code ec;
    buffer.consume(parser.put(buffer.data(), ec));
    if (ec == http::error::need_more) continue;
    if (ec) {
      out.status = ec == http::error::header_limit ? 431 : 400;
      return out;
    }
  }
  const ParseFailure head = check_head(parser, max_body);
  if (head.status != 0) {
    out.status = head.status;
    return out;
  }
  const auto& h = parser.get();
  FUZZ_CHECK(h.version() == 10 || h.version() == 11);
  FUZZ_CHECK(h.count(http::field::host) <= 1);
  if (h.version() == 11) FUZZ_CHECK(h.count(http::field::host) == 1);
  FUZZ_CHECK(!(h.count(http::field::transfer_encoding) > 0 && h.count(http::field::content_length) > 0));
  (void)origin_form(std::string_view(h.target().data(), h.target().size()));
  size_t wire = 0;
  for (;;) {
    ParseFailure failure;
    if (feed_body(parser, buffer, max_body, wire, failure)) {
      out.done = true;
      out.body = parser.get().body();
      FUZZ_CHECK(out.body.size() <= max_body);
      return out;
    }
    if (failure.status != 0) {
      out.status = failure.status;
      return out;
    }
    FUZZ_CHECK(buffer.size() <= std::max(kMaxChunkLineBytes, kMaxTrailerBytes) + 2);
    if (!next()) return out;  // the input ended inside the body
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 256 * 1024) return 0;
  const size_t max_body = 1 + static_cast<size_t>(data[0]) * 64;  // 1 .. 16321 bytes
  const size_t piece = 1 + data[1] % 97;
  const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
  const Outcome pieces = parse(input, max_body, piece);
  const Outcome whole = parse(input, max_body, input.size());
  if (pieces.done && whole.done) FUZZ_CHECK(pieces.body == whole.body);
  return 0;
}
