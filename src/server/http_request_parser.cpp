#include "server/http_request_parser.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "core/error.h"

namespace dsinfer::server {

namespace http = boost::beast::http;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

}  // namespace

// A framing that a proxy in front could read differently from this server lets a client hide a second
// request inside the body of the first (request smuggling): refused, and the connection closed.
ParseFailure check_head(const RequestParser& parser, size_t max_body_bytes) {
  const auto& h = parser.get();
  if (h.version() != 10 && h.version() != 11) return {505, "HTTP version not supported"};
  const size_t hosts = h.count(http::field::host);
  if (hosts > 1) return {400, "more than one Host header"};
  if (hosts == 0 && h.version() == 11) return {400, "missing Host header (required on HTTP/1.1)"};
  auto te_fields = h.equal_range(http::field::transfer_encoding);
  if (te_fields.first == te_fields.second) {
    // body_limit is only checked against Content-Length as the body arrives; fail before it does.
    if (auto len = parser.content_length(); len && *len > max_body_bytes)
      return {413, core::str_cat("request body larger than the limit of ", max_body_bytes, " bytes")};
    return {};
  }
  if (h.version() != 11) return {400, "Transfer-Encoding on an HTTP/1.0 request"};
  if (h.count(http::field::content_length) > 0) return {400, "both Transfer-Encoding and Content-Length"};
  std::vector<std::string> codings;
  for (auto it = te_fields.first; it != te_fields.second; ++it) {
    std::string_view value(it->value().data(), it->value().size());
    while (!value.empty()) {
      size_t comma = std::min(value.find(','), value.size());
      std::string_view item = value.substr(0, comma);
      value.remove_prefix(std::min(comma + 1, value.size()));
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      if (!item.empty()) codings.push_back(lower(item));
    }
  }
  if (codings.empty() || codings.back() != "chunked")
    return {400, "Transfer-Encoding must end with chunked"};
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i] == "chunked") return {400, "chunked applied more than once"};
  }
  if (codings.size() > 1) return {501, core::str_cat("transfer coding '", codings.front(), "' is not supported")};
  return {};
}

std::string origin_form(std::string_view target) {
  size_t skip = 0;
  if (iequals_prefix(target, "http://")) skip = 7;
  else if (iequals_prefix(target, "https://")) skip = 8;
  if (skip == 0) return std::string(target);
  std::string_view rest = target.substr(skip);
  rest = rest.substr(std::min(rest.find_first_of("/?#"), rest.size()));
  if (rest.empty() || rest.front() != '/') return core::str_cat("/", rest);
  return std::string(rest);
}

bool feed_body(RequestParser& parser, boost::beast::flat_buffer& buffer, size_t max_body_bytes, size_t& wire_bytes,
               ParseFailure& failure) {
  while (!parser.is_done() && buffer.size() > 0) {
    boost::system::error_code ec;
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    wire_bytes += used;
    if (ec == http::error::need_more) break;
    if (ec == http::error::body_limit) {
      failure = {413, core::str_cat("request body larger than the limit of ", max_body_bytes, " bytes")};
      return false;
    }
    if (ec) {
      failure = {400, core::str_cat("malformed HTTP request: ", ec.message())};
      return false;
    }
    if (used == 0) break;
  }
  if (parser.is_done()) return true;
  if (!parser.chunked()) return false;
  // Beast waits for an element to be complete before it parses it, however long it gets. What is left
  // unparsed is one incomplete element: a chunk-size line (after the previous chunk's line end), or,
  // once the last chunk's line is complete, the trailer section.
  std::string_view pending(static_cast<const char*>(buffer.data().data()), buffer.size());
  if (pending.substr(0, 2) == "\r\n") pending.remove_prefix(2);
  const bool trailer = pending.find("\r\n") != std::string_view::npos;
  if (!trailer && pending.size() > kMaxChunkLineBytes) {
    failure = {400, core::str_cat("chunk-size line longer than ", kMaxChunkLineBytes, " bytes")};
    return false;
  }
  if (trailer && pending.size() > kMaxTrailerBytes) {
    failure = {400, core::str_cat("chunked trailer section longer than ", kMaxTrailerBytes, " bytes")};
    return false;
  }
  const size_t payload = std::min(parser.get().body().size(), wire_bytes);
  if (wire_bytes - payload > max_body_bytes + kMaxTrailerBytes) {
    failure = {400, "chunk framing larger than the body limit"};
    return false;
  }
  return false;
}

}  // namespace dsinfer::server
