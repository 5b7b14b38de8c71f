#include <gtest/gtest.h>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/test_util.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::is_prefix;
using testing::matches;

std::shared_ptr<const Grammar> schema(const std::string& text, bool any_ws = false) {
  JsonSchemaOptions o;
  o.any_whitespace = any_ws;
  return std::make_shared<const Grammar>(json_schema_grammar(Json::parse(text), o));
}

std::string schema_error(const std::string& text) {
  try {
    json_schema_grammar(Json::parse(text));
  } catch (const core::Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonSchema, ObjectPropertiesRequiredAndOrder) {
  auto g = schema(R"g({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                       "tags":{"type":"array","items":{"type":"string"}}},"required":["name"]})g");
  EXPECT_TRUE(matches(g, R"g({"name":"Ann"})g"));
  EXPECT_TRUE(matches(g, R"g({"name":"Ann","age":42})g"));
  EXPECT_TRUE(matches(g, R"g({"name":"A\"n\\n\u00e9","age":-7,"tags":["x",""]})g"));
  EXPECT_TRUE(matches(g, R"g({"name":"Ann","tags":[]})g"));
  EXPECT_FALSE(matches(g, R"g({"age":42})g"));               // name is required
  EXPECT_FALSE(matches(g, R"g({"age":42,"name":"Ann"})g"));  // schema order
  EXPECT_FALSE(matches(g, R"g({"name":"Ann","x":1})g"));     // no extra keys when properties are listed
  EXPECT_FALSE(matches(g, R"g({"name":"Ann","age":4.5})g"));
  EXPECT_FALSE(matches(g, R"g({"name":"Ann",})g"));
  EXPECT_FALSE(matches(g, R"g({"name": "Ann"})g"));          // compact by default
  EXPECT_FALSE(matches(g, "{\"name\":\"a\nb\"}"));            // raw control characters are not JSON
  EXPECT_FALSE(matches(g, R"g({"name":"\ud800"})g"));        // an escaped surrogate is not a character
}

TEST(JsonSchema, AnyWhitespaceOption) {
  auto g = schema(R"g({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]})g", true);
  EXPECT_TRUE(matches(g, "{ \"a\" :\n true }"));
  EXPECT_TRUE(matches(g, "{\"a\":false}"));
}

TEST(JsonSchema, AdditionalPropertiesAsAMap) {
  auto g = schema(R"g({"type":"object","additionalProperties":{"type":"number"}})g");
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_TRUE(matches(g, R"g({"x":1,"y":-2.5e3})g"));
  EXPECT_FALSE(matches(g, R"g({"x":"1"})g"));
  auto any = schema(R"g({"type":"object"})g");
  EXPECT_TRUE(matches(any, R"g({"x":[1,{"y":null}],"z":"w"})g"));
  EXPECT_FALSE(matches(any, "[]"));
}

TEST(JsonSchema, ArraysPrefixItemsAndCounts) {
  auto g = schema(R"g({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})g");
  EXPECT_FALSE(matches(g, "[1]"));
  EXPECT_TRUE(matches(g, "[1,2]"));
  EXPECT_TRUE(matches(g, "[1,2,3]"));
  EXPECT_FALSE(matches(g, "[1,2,3,4]"));
  auto t = schema(R"g({"type":"array","prefixItems":[{"type":"string"},{"type":"boolean"}],"items":false})g");
  EXPECT_TRUE(matches(t, "[]"));
  EXPECT_TRUE(matches(t, R"g(["a"])g"));
  EXPECT_TRUE(matches(t, R"g(["a",true])g"));
  EXPECT_FALSE(matches(t, R"g(["a",true,1])g"));
  EXPECT_FALSE(matches(t, R"g([true])g"));
  auto m = schema(R"g({"prefixItems":[{"const":1}],"items":{"const":2},"minItems":3})g");
  EXPECT_FALSE(matches(m, "[1,2]"));
  EXPECT_TRUE(matches(m, "[1,2,2]"));
  EXPECT_TRUE(matches(m, "[1,2,2,2]"));
}

TEST(JsonSchema, EnumConstAnyOfNullable) {
  auto g = schema(R"g({"anyOf":[{"enum":["red","green",3,null]},{"const":{"k":[true]}},
                                 {"type":["boolean","null"]}]})g");
  EXPECT_TRUE(matches(g, R"g("red")g"));
  EXPECT_TRUE(matches(g, "3"));
  EXPECT_TRUE(matches(g, "null"));
  EXPECT_TRUE(matches(g, R"g({"k":[true]})g"));
  EXPECT_TRUE(matches(g, "false"));
  EXPECT_FALSE(matches(g, R"g("blue")g"));
  EXPECT_FALSE(matches(g, "4"));
  auto n = schema(R"g({"type":"string","nullable":true,"maxLength":2})g");
  EXPECT_TRUE(matches(n, "null"));
  EXPECT_TRUE(matches(n, R"g("ab")g"));
  EXPECT_TRUE(matches(n, R"g("é\n")g"));  // an escape is one character
  EXPECT_FALSE(matches(n, R"g("abc")g"));
}

// oneOf is compiled only when its branches are provably disjoint (then it is anyOf's set exactly): by
// type, by const/enum values, or by a required property with distinct const/enum values.
TEST(JsonSchema, OneOfOfDisjointBranchesOnly) {
  auto g = schema(R"g({"oneOf":[{"type":"string","maxLength":3},{"type":"integer"},{"type":"null"}]})g");
  EXPECT_TRUE(matches(g, R"g("ab")g"));
  EXPECT_TRUE(matches(g, "12"));
  EXPECT_TRUE(matches(g, "null"));
  EXPECT_FALSE(matches(g, "true"));
  auto shapes = schema(R"g({"$defs":{"circle":{"type":"object","properties":{"kind":{"const":"circle"},
      "r":{"type":"integer"}},"required":["kind","r"]}},
      "oneOf":[{"$ref":"#/$defs/circle"},{"type":"object","properties":{"kind":{"enum":["square","box"]},
      "side":{"type":"integer"}},"required":["kind","side"]}]})g");
  EXPECT_TRUE(matches(shapes, R"g({"kind":"circle","r":2})g"));
  EXPECT_TRUE(matches(shapes, R"g({"kind":"box","side":2})g"));
  EXPECT_FALSE(matches(shapes, R"g({"kind":"circle","side":2})g"));
  EXPECT_NO_THROW(schema(R"g({"oneOf":[{"enum":[1,"a"]},{"const":2},{"enum":["b",null]}]})g"));
  EXPECT_NO_THROW(schema(R"g({"oneOf":[{"type":"array"},{"type":"object","properties":{"a":{"type":"string"}}}]})g"));
  // Overlaps a grammar cannot exclude: 400s naming the branches.
  const std::string overlap =
      "json schema at #: 'oneOf' branches 0 and 1 may both match one instance, which a grammar cannot exclude: "
      "give them distinct types, distinct const/enum values, or a required property with distinct const/enum "
      "values (or use anyOf)";
  EXPECT_EQ(schema_error(R"g({"oneOf":[{"type":"integer"},{"type":"number"}]})g"), overlap);
  EXPECT_EQ(schema_error(R"g({"oneOf":[{"enum":[1,2]},{"enum":[3,2.0]}]})g"), overlap);  // 2 == 2.0
  EXPECT_EQ(schema_error(R"g({"oneOf":[{"const":"a"},{"type":"string"}]})g"), overlap);
  EXPECT_EQ(schema_error(R"g({"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},
      {"type":"object","properties":{"b":{"type":"string"}}}]})g"), overlap);
  // A tag that is not required does not separate (an object without it matches both).
  EXPECT_EQ(schema_error(R"g({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},
      {"type":"object","properties":{"k":{"const":"b"}}}]})g"), overlap);
  EXPECT_NE(schema_error(R"g({"type":"object","properties":{"x":{"oneOf":[{},{"type":"null"}]}}})g")
                .find("json schema at #/properties/x: 'oneOf' branches 0 and 1"),
            std::string::npos);
}

TEST(JsonSchema, RefsAndRecursion) {
  auto g = schema(R"g({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                        "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
                       "$ref":"#/$defs/node"})g");
  EXPECT_TRUE(matches(g, R"g({"v":1})g"));
  EXPECT_TRUE(matches(g, R"g({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})g"));
  EXPECT_FALSE(matches(g, R"g({"v":1,"kids":[{}]})g"));
  auto root = schema(R"g({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})g");
  EXPECT_TRUE(matches(root, "[1,[2,[]],3]"));
  EXPECT_FALSE(matches(root, "[1,[\"x\"]]"));
}

TEST(JsonSchema, AllOfMergesSimpleCases) {
  auto g = schema(R"g({"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}},
                       "allOf":[{"$ref":"#/$defs/base"},{"properties":{"name":{"type":"string"}},"required":["name"]}]})g");
  EXPECT_TRUE(matches(g, R"g({"id":1,"name":"x"})g"));
  EXPECT_FALSE(matches(g, R"g({"id":1})g"));
}

TEST(JsonSchema, StringPatternAndFormats) {
  auto p = schema(R"g({"type":"string","pattern":"^[a-z]+\"\\\\\\d$"})g");  // letters, a quote, a backslash, a digit
  EXPECT_TRUE(matches(p, R"g("ab\"\\7")g"));
  EXPECT_FALSE(matches(p, R"g("ab"\7")g"));
  auto date = schema(R"g({"type":"string","format":"date"})g");
  EXPECT_TRUE(matches(date, R"g("2024-12-31")g"));
  EXPECT_FALSE(matches(date, R"g("2024-02-30")g"));
  EXPECT_FALSE(matches(date, R"g("2024-13-01")g"));
  auto dt = schema(R"g({"type":"string","format":"date-time"})g");
  EXPECT_TRUE(matches(dt, R"g("2024-01-02T03:04:05.678Z")g"));
  EXPECT_TRUE(matches(dt, R"g("2024-01-02T23:59:00+05:30")g"));
  EXPECT_FALSE(matches(dt, R"g("2024-01-02T24:00:00Z")g"));
  auto uuid = schema(R"g({"type":"string","format":"uuid"})g");
  EXPECT_TRUE(matches(uuid, R"g("123e4567-e89b-12d3-a456-426614174000")g"));
  EXPECT_FALSE(matches(uuid, R"g("123e4567e89b12d3a456426614174000")g"));
  auto ip = schema(R"g({"type":"string","format":"ipv4"})g");
  EXPECT_TRUE(matches(ip, R"g("192.168.0.255")g"));
  EXPECT_FALSE(matches(ip, R"g("256.1.1.1")g"));
  EXPECT_FALSE(matches(ip, R"g("01.1.1.1")g"));
  auto email = schema(R"g({"type":"string","format":"email"})g");
  EXPECT_TRUE(matches(email, R"g("a.b+c@example.co")g"));
  EXPECT_FALSE(matches(email, R"g("a@b")g"));
}

TEST(JsonSchema, IntegerBounds) {
  auto g = schema(R"g({"type":"integer","minimum":-12,"maximum":105})g");
  for (const char* ok : {"-12", "-9", "-1", "0", "7", "10", "99", "100", "105"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"-13", "-0", "106", "110", "999", "007", "1000"}) EXPECT_FALSE(matches(g, bad)) << bad;
  auto pos = schema(R"g({"type":"integer","exclusiveMinimum":0})g");
  EXPECT_TRUE(matches(pos, "1"));
  EXPECT_TRUE(matches(pos, "123456789012"));
  EXPECT_FALSE(matches(pos, "0"));
  EXPECT_FALSE(matches(pos, "-1"));
  auto big = schema(R"g({"type":"integer","minimum":250})g");
  EXPECT_TRUE(matches(big, "250"));
  EXPECT_TRUE(matches(big, "999"));
  EXPECT_TRUE(matches(big, "1000"));
  EXPECT_FALSE(matches(big, "249"));
  EXPECT_FALSE(matches(big, "99"));
  auto neg = schema(R"g({"type":"integer","exclusiveMaximum":-3})g");
  EXPECT_TRUE(matches(neg, "-4"));
  EXPECT_TRUE(matches(neg, "-400"));
  EXPECT_FALSE(matches(neg, "-3"));
  EXPECT_FALSE(matches(neg, "0"));
}

TEST(JsonSchema, NumberBounds) {
  auto g = schema(R"g({"type":"number","minimum":0,"maximum":100})g");
  for (const char* ok : {"0", "0.5", "99.999", "100", "100.00", "42"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"-0.5", "100.01", "101", "1e3"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsNamingThem) {
  EXPECT_EQ(schema_error(R"g({"type":"object","properties":{"a":{"not":{"type":"string"}}}})g"),
            "json schema at #/properties/a: unsupported keyword 'not'");
  EXPECT_EQ(schema_error(R"g({"type":"array","uniqueItems":true})g"), "json schema at #: unsupported keyword 'uniqueItems'");
  EXPECT_EQ(schema_error(R"g({"$ref":"#/$defs/missing"})g"), "json schema at #: unknown $ref '#/$defs/missing'");
  EXPECT_EQ(schema_error(R"g({"$ref":"https://example.com/s.json"})g"),
            "json schema at #: unsupported $ref 'https://example.com/s.json' (only local '#/...' references)");
  EXPECT_EQ(schema_error(R"g({"type":"string","format":"hostname"})g"), "json schema at #: unsupported format 'hostname'");
  EXPECT_EQ(schema_error(R"g({"type":"string","pattern":"(a"})g"),
            "json schema at #: pattern: regex line 1 column 1: unclosed '('");
  EXPECT_EQ(schema_error(R"g({"type":"number","exclusiveMinimum":0})g"),
            "json schema at #: exclusiveMinimum/exclusiveMaximum on numbers are not supported (use an integer type)");
  EXPECT_EQ(schema_error(R"g({"type":"wat"})g"), "json schema at #: unknown type 'wat'");
  EXPECT_EQ(schema_error(R"g({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})g"),
            "json schema: rule '#/$defs/a' can never finish (every alternative recurses without a way out)");
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = std::make_shared<const Grammar>(json_object_grammar());
  EXPECT_TRUE(matches(g, R"g({"a":[1,2.5,-3e-2,true,false,null,"s",{}],"b":{"c":"d"}})g"));
  EXPECT_FALSE(matches(g, R"g({"a":01})g"));
  EXPECT_FALSE(matches(g, "\"s\""));
  EXPECT_TRUE(is_prefix(g, R"g({"a":[1,{"b")g"));
}

}  // namespace
}  // namespace dsinfer::grammar
