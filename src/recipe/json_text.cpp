#include "recipe/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>
#include <algorithm>

namespace dsinfer::recipe {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when the bytes there are not one.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  uint32_t min = 0;
  uint32_t cp = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, min = 0x80, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, min = 0x800, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const unsigned char b = byte(i + k);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Shortest round-trip digits of |value| and the decimal point position: value = 0.DIGITS * 10^point.
void shortest_digits(double value, std::string& digits, int& point) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(value), std::chars_format::scientific);
  std::string_view text(buf, static_cast<size_t>(res.ptr - buf));
  const size_t e = text.find('e');
  std::string_view mantissa = text.substr(0, e);
  const int exponent = std::atoi(std::string(text.substr(e + 1)).c_str());
  digits.clear();
  for (char c : mantissa)
    if (c != '.') digits.push_back(c);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  point = exponent + 1;
}

// Fixed notation when min_point < point <= 16, scientific otherwise; the two styles differ only in the
// lower bound and in how the exponent is written.
std::string format_double(double value, int min_point, bool pad_exponent) {
  if (!std::isfinite(value)) return "null";
  std::string out = std::signbit(value) ? "-" : "";
  if (value == 0.0) return out + "0.0";
  std::string digits;
  int point = 0;
  shortest_digits(value, digits, point);
  const int n = static_cast<int>(digits.size());
  if (point > min_point && point <= 16) {
    if (point <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-point), '0');
      out += digits;
    } else if (point < n) {
      out += digits.substr(0, static_cast<size_t>(point));
      out += '.';
      out += digits.substr(static_cast<size_t>(point));
    } else {
      out += digits;
      out.append(static_cast<size_t>(point - n), '0');
      out += ".0";
    }
    return out;
  }
  out += digits[0];
  if (n > 1) {
    out += '.';
    out += digits.substr(1);
  }
  const int exp = point - 1;
  out += exp < 0 ? "e-" : "e+";
  std::string mag = std::to_string(std::abs(exp));
  if (pad_exponent && mag.size() < 2) mag = "0" + mag;
  out += mag;
  return out;
}

void write_json(const Json& value, std::string& out, bool python) {
  const char* item_sep = python ? ", " : ",";
  const char* key_sep = python ? ": " : ":";
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      out += "null";
      break;
    case Json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      break;
    case Json::value_t::number_integer:
      out += std::to_string(value.get<int64_t>());
      break;
    case Json::value_t::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      break;
    case Json::value_t::number_float:
      out += python ? format_double_python(value.get<double>()) : format_double_compact(value.get<double>());
      break;
    case Json::value_t::string:
      out += json_quote(value.get_ref<const std::string&>());
      break;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += item_sep;
        first = false;
        write_json(item, out, python);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += item_sep;
        first = false;
        out += json_quote(it.key());
        out += key_sep;
        write_json(it.value(), out, python);
      }
      out += '}';
      break;
    }
    case Json::value_t::binary:
      out += "null";
      break;
  }
}

}  // namespace

std::string format_double_compact(double value) { return format_double(value, -5, false); }
std::string format_double_python(double value) { return format_double(value, -4, true); }

std::string json_quote(std::string_view text, bool quoted) {
  std::string out;
  out.reserve(text.size() + 2);
  if (quoted) out += '"';
  static const char* kHex = "0123456789abcdef";
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x80) {
      const size_t len = utf8_sequence_length(text, i);
      if (len == 0) {
        out += "\xEF\xBF\xBD";  // U+FFFD
        ++i;
      } else {
        out.append(text.substr(i, len));
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  if (quoted) out += '"';
  return out;
}

std::string to_compact_json(const Json& value) {
  std::string out;
  write_json(value, out, false);
  return out;
}

std::string to_python_json(const Json& value) {
  std::string out;
  write_json(value, out, true);
  return out;
}

namespace {

// Builds a value from nlohmann's SAX events. nlohmann's own ordered DOM parser inserts every key by a
// linear search of its object, n^2 for an object of n keys (a 1.1 MB body of 100k keys took 9.5 s);
// here a key is appended, and a hash index per open object finds a repeated key (its last value wins,
// in the place of its first, as the DOM parser does). Linear in the text.
class LinearJsonBuilder {
 public:
  Json take() { return std::move(result_); }

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return put(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t&) { return put(Json(v)); }
  bool string(Json::string_t& v) { return put(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return false; }  // JSON text has no binary values
  bool start_object(size_t) { return open(Json::object()); }
  bool key(Json::string_t& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(size_t) { return open(Json::array()); }
  bool end_array() { return close(); }
  template <class Exception>
  bool parse_error(size_t, const std::string&, const Exception& e) {
    throw JsonSyntaxError(json_error_message(e));
  }

 private:
  struct Open {
    Json value;
    std::string key;                                // of the member whose value comes next
    std::unordered_map<std::string, size_t> index;  // key -> place among the members
  };
  bool open(Json value) {
    if (stack_.size() >= static_cast<size_t>(kMaxJsonDepth)) throw JsonDepthError();
    stack_.push_back(Open{std::move(value), {}, {}});
    return true;
  }
  bool close() {
    Json value = std::move(stack_.back().value);
    stack_.pop_back();
    return put(std::move(value));
  }
  bool put(Json value) {
    if (stack_.empty()) {
      result_ = std::move(value);
      return true;
    }
    Open& top = stack_.back();
    if (top.value.is_array()) {
      top.value.get_ref<Json::array_t&>().push_back(std::move(value));
      return true;
    }
    auto& members = top.value.get_ref<Json::object_t&>();
    const auto [at, added] = top.index.try_emplace(top.key, members.size());
    if (added) {
      members.emplace_back(std::move(top.key), std::move(value));  // the vector's append, no search
    } else {
      (members.begin() + static_cast<std::ptrdiff_t>(at->second))->second = std::move(value);
    }
    return true;
  }
  std::vector<Open> stack_;
  Json result_;
};

}  // namespace

Json parse_json(std::string_view text) {
  LinearJsonBuilder builder;
  if (!Json::sax_parse(text.begin(), text.end(), &builder)) throw JsonSyntaxError("invalid JSON");
  return builder.take();
}

std::string json_error_message(const std::exception& e) {
  std::string_view what = e.what();
  if (dynamic_cast<const Json::exception*>(&e) != nullptr && what.starts_with("[json.exception.")) {
    if (const size_t end = what.find("] "); end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return std::string(what);
}

int json_depth(const Json& value) {
  int max_depth = 0;
  std::vector<std::pair<const Json*, int>> stack = {{&value, 0}};
  while (!stack.empty()) {
    auto [v, d] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    max_depth = std::max(max_depth, d + 1);
    for (const auto& child : *v) stack.push_back({&child, d + 1});
  }
  return max_depth;
}

}  // namespace dsinfer::recipe
