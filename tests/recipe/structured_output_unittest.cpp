// Reading the output constraint a request asks for, per protocol.
#include <gtest/gtest.h>

#include "recipe/conversion_error.h"
#include "recipe/structured_output.h"

namespace dsinfer::recipe {
namespace {

using Kind = OutputConstraintRequest::Kind;

OutputConstraintRequest read(Protocol p, const char* body) { return read_output_constraint(p, parse_json(body)); }

std::string constraint_error(Protocol p, const char* body) {
  try {
    read(p, body);
  } catch (const ConversionError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(StructuredOutputRequest, ChatResponseFormat) {
  auto s = read(Protocol::kChatCompletions,
                R"g({"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
                    "schema":{"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}}}}})g");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.source, R"g({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})g");
  EXPECT_EQ(read(Protocol::kChatCompletions, R"g({"response_format":{"type":"json_object"}})g").kind, Kind::kJsonObject);
  EXPECT_EQ(read(Protocol::kChatCompletions, R"g({"response_format":{"type":"text"}})g").kind, Kind::kNone);
  EXPECT_EQ(read(Protocol::kChatCompletions, R"g({})g").kind, Kind::kNone);
  EXPECT_EQ(constraint_error(Protocol::kChatCompletions, R"g({"response_format":{"type":"json_schema"}})g"),
            "response_format: missing field `json_schema`");
  EXPECT_EQ(constraint_error(Protocol::kChatCompletions, R"g({"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})g"),
            "response_format.json_schema: missing field `schema`");
}

TEST(StructuredOutputRequest, ResponsesTextFormat) {
  auto s = read(Protocol::kResponses, R"g({"text":{"format":{"type":"json_schema","name":"x","schema":{"type":"string"}}}})g");
  EXPECT_EQ(s.kind, Kind::kJsonSchema);
  EXPECT_EQ(s.source, R"g({"type":"string"})g");
  EXPECT_EQ(read(Protocol::kResponses, R"g({"text":{"format":{"type":"json_object"}}})g").kind, Kind::kJsonObject);
}

TEST(StructuredOutputRequest, RegexAndEbnfExtensionsOnEveryRoute) {
  for (Protocol p : {Protocol::kChatCompletions, Protocol::kResponses, Protocol::kMessages}) {
    auto r = read(p, R"g({"regex":"[0-9]+"})g");
    EXPECT_EQ(r.kind, Kind::kRegex);
    EXPECT_EQ(r.source, "[0-9]+");
    auto e = read(p, R"g({"ebnf":"root ::= \"a\""})g");
    EXPECT_EQ(e.kind, Kind::kEbnf);
    EXPECT_EQ(e.source, "root ::= \"a\"");
  }
  EXPECT_EQ(constraint_error(Protocol::kMessages, R"g({"regex":"a","ebnf":"root ::= \"a\""})g"),
            "structured output: ebnf cannot be combined with another output constraint (response_format/text.format "
            "json_schema or json_object, regex, ebnf: one at most)");
  EXPECT_NE(constraint_error(Protocol::kMessages, R"g({"regex":5})g").find("regex"), std::string::npos);
}

}  // namespace
}  // namespace dsinfer::recipe
