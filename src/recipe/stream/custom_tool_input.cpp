#include "recipe/stream/custom_tool_input.h"

#include <cstdint>

#include "tokenizer/utf8.h"

namespace dsinfer::recipe::stream {
namespace {

constexpr std::string_view kParts[] = {"{", "\"input\"", ":", "\""};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads \uXXXX at esc[pos]; -1 when it is not one (yet).
int64_t read_u_escape(const std::string& esc, size_t pos) {
  if (esc.size() < pos + 6 || esc[pos] != '\\' || esc[pos + 1] != 'u') return -1;
  int64_t v = 0;
  for (size_t k = pos + 2; k < pos + 6; ++k) {
    const int h = hex_value(esc[k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Whether `esc` (starting with a backslash) could still become a valid escape with more input.
bool incomplete(const std::string& esc) {
  if (esc.size() < 2) return true;
  if (esc[1] != 'u') return false;
  for (size_t k = 2; k < esc.size() && k < 6; ++k)
    if (hex_value(esc[k]) < 0) return false;
  if (esc.size() < 6) return true;
  const int64_t first = read_u_escape(esc, 0);
  if (first < 0xD800 || first > 0xDBFF) return false;  // not a high surrogate: complete
  // A high surrogate waits for its low half.
  if (esc.size() == 6) return true;
  if (esc[6] != '\\') return false;
  if (esc.size() == 7) return true;
  if (esc[7] != 'u') return false;
  for (size_t k = 8; k < esc.size() && k < 12; ++k)
    if (hex_value(esc[k]) < 0) return false;
  return esc.size() < 12;
}

// Decodes a complete escape; invalid ones come out as written.
std::string decode_escape(const std::string& esc) {
  std::string out;
  if (esc.size() == 2) {
    switch (esc[1]) {
      case '"': return "\"";
      case '\\': return "\\";
      case '/': return "/";
      case 'b': return "\b";
      case 'f': return "\f";
      case 'n': return "\n";
      case 'r': return "\r";
      case 't': return "\t";
      default: return esc;
    }
  }
  const int64_t first = read_u_escape(esc, 0);
  if (first < 0) return esc;
  if (first >= 0xD800 && first <= 0xDBFF) {
    const int64_t second = read_u_escape(esc, 6);
    if (second >= 0xDC00 && second <= 0xDFFF && esc.size() == 12) {
      const uint32_t cp = 0x10000 + ((static_cast<uint32_t>(first) - 0xD800) << 10) +
                          (static_cast<uint32_t>(second) - 0xDC00);
      tokenizer::utf8::append_codepoint(static_cast<char32_t>(cp), out);
      return out;
    }
    return esc;
  }
  if (first >= 0xDC00 && first <= 0xDFFF) return esc;
  if (esc.size() != 6) return esc;
  tokenizer::utf8::append_codepoint(static_cast<char32_t>(first), out);
  return out;
}

}  // namespace

void CustomToolInputDecoder::feed_prefix(char c, std::string& out) {
  held_ += c;
  const std::string_view part = kParts[part_];
  if (c == part[offset_]) {
    if (++offset_ == part.size()) {
      ++part_;
      offset_ = 0;
      if (part_ == std::size(kParts)) {
        held_.clear();
        state_ = State::kValue;
      }
    }
  } else if (offset_ != 0 || !is_space(c)) {
    out += held_;
    held_.clear();
    state_ = State::kPassthrough;
  }
}

void CustomToolInputDecoder::feed_value(char c, std::string& out) {
  if (held_.empty()) {
    if (c == '\\') held_ = "\\";
    else if (c == '"') state_ = State::kDone;
    else out += c;
    return;
  }
  held_ += c;
  if (incomplete(held_)) return;
  // A quote that ends an unfinishable escape also ends the string.
  if (c == '"' && held_.size() > 2) {
    held_.pop_back();
    out += held_;
    held_.clear();
    state_ = State::kDone;
    return;
  }
  out += decode_escape(held_);
  held_.clear();
}

std::string CustomToolInputDecoder::feed(std::string_view piece) {
  std::string out;
  for (const char c : piece) {
    switch (state_) {
      case State::kPrefix: feed_prefix(c, out); break;
      case State::kValue: feed_value(c, out); break;
      case State::kPassthrough: out += c; break;
      case State::kDone: return out;
    }
  }
  return out;
}

std::string CustomToolInputDecoder::finish() {
  state_ = State::kDone;
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace dsinfer::recipe::stream
