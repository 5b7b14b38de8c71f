#include <gtest/gtest.h>

#include "recipe/json_text.h"

namespace dsinfer::recipe {
namespace {

TEST(JsonText, CompactAndPythonNumbers) {
  // Expected texts from the `numbers` golden (serde compact) and Python's float repr.
  struct Case {
    double value;
    const char* compact;
    const char* python;
  } cases[] = {
      {1e5, "100000.0", "100000.0"},   {1e16, "1e+16", "1e+16"},       {1.5e-7, "1.5e-7", "1.5e-07"},
      {0.00001, "0.00001", "1e-05"},   {0.0001, "0.0001", "0.0001"},   {-0.0, "-0.0", "-0.0"},
      {1e-10, "1e-10", "1e-10"},       {0.1, "0.1", "0.1"},            {2.5e300, "2.5e+300", "2.5e+300"},
      {1e15, "1000000000000000.0", "1000000000000000.0"},              {3.14159, "3.14159", "3.14159"},
      {1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308"},
      {static_cast<double>(0.7f), "0.699999988079071", "0.699999988079071"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(format_double_compact(c.value), c.compact) << c.value;
    EXPECT_EQ(format_double_python(c.value), c.python) << c.value;
  }
}

TEST(JsonText, SeparatorsKeyOrderAndIntegers) {
  const Json v = parse_json(R"({"b":1,"a":[true,null,"x"],"n":18446744073709551615,"m":-9223372036854775808,"f":1.0})");
  EXPECT_EQ(to_compact_json(v), R"({"b":1,"a":[true,null,"x"],"n":18446744073709551615,"m":-9223372036854775808,"f":1.0})");
  EXPECT_EQ(to_python_json(v),
            R"({"b": 1, "a": [true, null, "x"], "n": 18446744073709551615, "m": -9223372036854775808, "f": 1.0})");
  EXPECT_EQ(to_python_json(parse_json("123456789012345678901234567890")), "1.2345678901234568e+29");
  EXPECT_EQ(to_python_json(Json::object()), "{}");
  EXPECT_EQ(to_python_json(Json::array()), "[]");
}

TEST(JsonText, Escapes) {
  EXPECT_EQ(json_quote("a\"b\\c\n\r\t\b\f\x01\x1f\x7f/"), "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f\x7f/\"");
  EXPECT_EQ(json_quote("\xE4\xB8\xAD\xEF\xBD\x9C", false), "\xE4\xB8\xAD\xEF\xBD\x9C");  // raw UTF-8
  EXPECT_EQ(json_quote("a\xFF" "b", false), "a\xEF\xBF\xBD" "b");                    // invalid byte -> U+FFFD
  EXPECT_EQ(json_quote("\xE4\xB8", false), "\xEF\xBF\xBD\xEF\xBF\xBD");               // truncated sequence
}

}  // namespace
}  // namespace dsinfer::recipe
