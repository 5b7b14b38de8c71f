// Reading the output constraint a request asks for, per protocol.
#include <gtest/gtest.h>

#include "recipe/conversion_error.h"
#include "recipe/convert.h"
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

// read_strict_tools on the converted request: what the server's tool-call grammar is compiled from.
Json strict_spec(Protocol p, const char* body, PromptVersion v = PromptVersion::kV41) {
  const Json b = parse_json(body);
  OutputConstraintRequest out = read_output_constraint(p, b);
  read_strict_tools(out, p, b, convert_request(p, b).request, v);
  if (out.kind == Kind::kNone) return nullptr;
  EXPECT_EQ(out.kind, Kind::kToolCalls);
  return parse_json(out.source);
}

TEST(StructuredOutputRequest, StrictToolsOnEveryProtocol) {
  const char* chat = R"g({"model":"m","messages":[{"role":"user","content":"hi"}],"thinking":{"type":"disabled"},
    "tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}},
             {"type":"function","function":{"name":"g","parameters":{"type":"object"}}}],"tool_choice":"required","parallel_tool_calls":false})g";
  Json s = strict_spec(Protocol::kChatCompletions, chat);
  EXPECT_EQ(s["tags"], Json::array({" calls", " invoke", " parameter"}));
  EXPECT_EQ(s["inside_block"], true);
  EXPECT_EQ(s["thinking"], false);
  EXPECT_EQ(s["single_call"], true);
  ASSERT_EQ(s["tools"].size(), 2u);
  EXPECT_EQ(s["tools"][0]["name"], "f");
  EXPECT_EQ(s["tools"][0]["strict"], true);
  EXPECT_EQ(s["tools"][0]["parameters"]["properties"]["a"]["type"], "integer");
  EXPECT_EQ(s["tools"][1]["strict"], false);
  EXPECT_EQ(strict_spec(Protocol::kChatCompletions, chat, PromptVersion::kV4)["tags"],
            Json::array({"tool_calls", "invoke", "parameter"}));
  // Auto in thinking mode: the grammar starts in the reasoning; no strict tool, or choice none: nothing.
  Json a = strict_spec(Protocol::kChatCompletions, R"g({"model":"m","messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}]})g");
  EXPECT_EQ(a["inside_block"], false);
  EXPECT_EQ(a["thinking"], true);
  EXPECT_EQ(a["single_call"], false);
  EXPECT_TRUE(strict_spec(Protocol::kChatCompletions, R"g({"model":"m","messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]})g").is_null());
  EXPECT_TRUE(strict_spec(Protocol::kChatCompletions, R"g({"model":"m","messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}],"tool_choice":"none"})g").is_null());
  // Responses function tools; Messages tools opt in with strict beside input_schema.
  Json r = strict_spec(Protocol::kResponses, R"g({"model":"m","input":"hi","reasoning":{"effort":"none"},
    "tools":[{"type":"function","name":"f","strict":true,"parameters":{"type":"object"}}],"tool_choice":"required"})g");
  EXPECT_EQ(r["inside_block"], true);
  EXPECT_EQ(r["tools"][0]["name"], "f");
  Json m = strict_spec(Protocol::kMessages, R"g({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
    "tools":[{"name":"f","strict":true,"input_schema":{"type":"object"}}],
    "tool_choice":{"type":"any","disable_parallel_tool_use":true}})g");
  EXPECT_EQ(m["inside_block"], false);  // Messages' any is auto in the recipe: the prompt opens no block
  EXPECT_EQ(m["single_call"], true);
  EXPECT_EQ(m["require_call"], true);  // ... so the grammar forces the call
  Json m_auto = strict_spec(Protocol::kMessages, R"g({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
    "tools":[{"name":"f","strict":true,"input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"}})g");
  EXPECT_FALSE(m_auto.contains("require_call"));
  Json named = strict_spec(Protocol::kMessages, R"g({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
    "thinking":{"type":"disabled"},"tools":[{"name":"f","strict":true,"input_schema":{"type":"object"}}],
    "tool_choice":{"type":"tool","name":"f"}})g");
  EXPECT_EQ(named["inside_block"], true);
  EXPECT_EQ(named["thinking"], false);
  EXPECT_TRUE(strict_spec(Protocol::kMessages, R"g({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],
    "tools":[{"name":"f","input_schema":{"type":"object"}}]})g").is_null());
}

// Responses function tools are strict unless they say strict: false (OpenAI's default there); Chat's
// stay non-strict unless they say strict: true.
TEST(StructuredOutputRequest, ResponsesToolsAreStrictByDefault) {
  Json r = strict_spec(Protocol::kResponses, R"g({"model":"m","input":"hi","reasoning":{"effort":"none"},
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"}},
             {"type":"function","name":"g","strict":false,"parameters":{"type":"object"}},
             {"type":"function","name":"h","strict":true,"parameters":{"type":"object"}}]})g");
  ASSERT_EQ(r["tools"].size(), 3u);
  EXPECT_EQ(r["tools"][0]["strict"], true);
  EXPECT_EQ(r["tools"][0]["by_default"], true);
  EXPECT_EQ(r["tools"][1]["strict"], false);
  EXPECT_FALSE(r["tools"][1].contains("by_default"));
  EXPECT_EQ(r["tools"][2]["strict"], true);
  EXPECT_FALSE(r["tools"][2].contains("by_default"));
  EXPECT_TRUE(strict_spec(Protocol::kResponses, R"g({"model":"m","input":"hi",
    "tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"object"}}]})g").is_null());
  EXPECT_TRUE(strict_spec(Protocol::kChatCompletions, R"g({"model":"m","messages":[{"role":"user","content":"hi"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]})g").is_null());
  // Strict only by default beside text.format: the format wins, no 400.
  const Json b = parse_json(R"g({"model":"m","input":"reply in json","text":{"format":{"type":"json_object"}},
    "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]})g");
  OutputConstraintRequest out = read_output_constraint(Protocol::kResponses, b);
  read_strict_tools(out, Protocol::kResponses, b, convert_request(Protocol::kResponses, b).request, PromptVersion::kV41);
  EXPECT_EQ(out.kind, Kind::kJsonObject);
}

TEST(StructuredOutputRequest, StrictToolsBesideAnotherConstraintIsABadRequest) {
  try {
    strict_spec(Protocol::kChatCompletions, R"g({"model":"m","messages":[{"role":"user","content":"hi"}],"regex":"a",
      "tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":{"type":"object"}}}]})g");
    FAIL() << "accepted";
  } catch (const ConversionError& e) {
    EXPECT_NE(std::string(e.what()).find("strict tools cannot be combined"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsinfer::recipe
