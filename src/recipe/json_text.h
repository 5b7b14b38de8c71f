// Byte-exact JSON text for the recipe: the reference implementation writes compact JSON the serde way and
// prompt JSON the Python `json.dumps(ensure_ascii=False)` way, and both differ from nlohmann's dump() in
// number formatting (e.g. 1.5e-7 vs 1.5e-07) and separators. Key order is whatever the ordered_json holds.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace dsinfer::recipe {

using Json = nlohmann::ordered_json;

// Compact JSON: "," and ":" separators, raw UTF-8, floats in shortest round-trip form with a decimal
// point or exponent ("1.0", "1e+16", "1.5e-7", "0.00001"). Invalid UTF-8 in strings becomes U+FFFD.
std::string to_compact_json(const Json& value);

// Python json.dumps(value, ensure_ascii=False): ", " and ": " separators, Python float repr
// ("1e-05", "1.5e-07", "1e+16"). Used for tool schemas, DSML parameter values and tool_use arguments.
std::string to_python_json(const Json& value);

// One number as the two styles write it (the `numbers` golden op).
std::string format_double_compact(double value);
std::string format_double_python(double value);

// A JSON string literal with the escapes both styles share (\" \\ \n \r \t \b \f, \u00XX for other
// control characters, everything else raw). `quoted` false leaves the surrounding quotes off.
std::string json_quote(std::string_view text, bool quoted = true);

// Nesting deeper than this many arrays/objects is refused, as serde_json's recursion limit (128) refuses
// it; it also keeps every recursive walk over client JSON bounded.
inline constexpr int kMaxJsonDepth = 127;

// Parses JSON text keeping key order, in time linear in the text. Throws JsonSyntaxError on bad syntax,
// JsonDepthError past kMaxJsonDepth.
Json parse_json(std::string_view text);

// A nlohmann exception's message without the library's "[json.exception.parse_error.101] " tag, for
// messages that reach clients; other exceptions' messages as they are.
std::string json_error_message(const std::exception& e);

class JsonSyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonDepthError : public std::runtime_error {
 public:
  JsonDepthError() : std::runtime_error("recursion limit exceeded") {}
};

// Nesting depth of a value (a scalar is 0, [] is 1); iterative, so any value can be measured.
int json_depth(const Json& value);

}  // namespace dsinfer::recipe
