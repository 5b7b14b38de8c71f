// Request conversion rules beyond the golden corpus: error texts, Responses call grouping, Messages
// tool_use/tool_result pairing, options, 0.2.0 prefix continuation and resolve_max_tokens.
#include <gtest/gtest.h>

#include "recipe/convert.h"
#include "recipe/request_reader.h"

namespace dsinfer::recipe {
namespace {

std::string error_of(Protocol protocol, const char* body, const ConversionOptions& options = {}) {
  try {
    convert_request_text(protocol, body, options);
  } catch (const ConversionError& e) {
    return e.what();
  }
  return "(accepted)";
}

ConversationRequest convert(Protocol protocol, const char* body, const ConversionOptions& options = {}) {
  return convert_request_text(protocol, body, options).request;
}

constexpr Protocol kChat = Protocol::kChatCompletions;
constexpr Protocol kResp = Protocol::kResponses;
constexpr Protocol kMsg = Protocol::kMessages;

// The text entry point (the CLI's) reads a body however wide its objects (the parse is linear in them);
// the known fields are still found among 100k unknown ones.
TEST(Convert, TextEntryReadsVeryWideObjects) {
  std::string extra;
  for (size_t i = 0; i < 100000; ++i) extra += ",\"x" + std::to_string(i) + "\":0";
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"x"}])" + extra + "}";
  EXPECT_EQ(error_of(kChat, body.c_str()), "(accepted)");
  EXPECT_EQ(error_of(kChat, (R"({"model":"m")" + extra + "}").c_str()), "missing field `messages`");
}

TEST(Convert, ChatDeserialisationErrors) {
  EXPECT_EQ(error_of(kChat, R"({})"), "missing field `messages`");
  EXPECT_EQ(error_of(kChat, R"({"messages":[]})"), "missing field `model`");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"developer","content":"x"}]})"),
            "messages[0].role: unknown variant `developer`, expected one of `system`, `user`, `assistant`, `tool`, "
            "`latest_reminder`");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user"}]})"), "messages[0]: missing field `content`");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1})"),
            "max_tokens: invalid value: integer `-1`, expected u32");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_completion_tokens":0})"),
            "max_completion_tokens must be greater than zero");
  EXPECT_EQ(error_of(kChat, "{\"model\":"), error_of(kChat, "{\"model\":"));  // deterministic
  EXPECT_NE(error_of(kChat, "{\"model\":").find("invalid JSON body"), std::string::npos);
}

TEST(Convert, ChatValidation) {
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})"),
            "top_p must be in (0, 1]");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":2.5})"),
            "presence_penalty must be in [-2, 2]");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[]}]})"),
            "Invalid 'messages[1].tool_calls': empty array. Expected an array with minimum length 1, but got an empty "
            "array instead.");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}},{"id":"a","function":{"name":"f","arguments":"{}"}}]}]})"),
            "Duplicate value for 'tool_call_id' of a in message[1]");
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},
      {"role":"tool","tool_call_id":"b","content":"r"}]})"),
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            "'tool_call_id'. Unexpected tool_call_id: b");
  // With no tools, a required choice quietly becomes auto (no thinking error).
  const auto r = convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})");
  EXPECT_EQ(r.conversation.tool_choice, ToolChoice::kAuto);
  EXPECT_FALSE(r.parsing_options.tool_call_initial_stage);
  // An image placeholder in a historical tool-call argument is rejected too.
  EXPECT_NE(error_of(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"v\":\"<｜image｜>\"}"}}]},
      {"role":"tool","tool_call_id":"a","content":"r"}]})")
                .find("is not allowed for this API"),
            std::string::npos);
}

TEST(Convert, ChatIncludeUsageAndStops) {
  auto c = convert_request_text(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true})");
  EXPECT_FALSE(c.include_usage);
  c = convert_request_text(kChat,
                           R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_TRUE(c.include_usage);
  c = convert_request_text(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":["", "a"]})");
  EXPECT_EQ(c.request.parsing_options.stop_sequences, (std::vector<std::string>{"", "a"}));  // the parser drops ""
}

TEST(Convert, ChatPrefixContinuation) {
  auto r = convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"","reasoning_content":"Let me","prefix":true}]})");
  ASSERT_TRUE(r.conversation.messages.back().prefix);
  EXPECT_EQ(r.parsing_options.reasoning_initial_stage, ReasoningStage::kReasoning);
  r = convert(kChat, R"({"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":"The answer","prefix":true}]})");
  EXPECT_EQ(r.parsing_options.reasoning_initial_stage, ReasoningStage::kContent);
  EXPECT_EQ(error_of(kChat, R"({"model":"m","messages":[{"role":"assistant","content":"a","prefix":true},
      {"role":"user","content":"x"}]})"),
            "messages[0]: only the last message can have prefix set to true");
}

TEST(Convert, ResolveMaxTokens) {
  auto r = convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.resolve_max_tokens(100, 0), kDefaultMaxTokensThinking);
  EXPECT_EQ(r.resolve_max_tokens(100, 1000), 900u);  // the default is capped by what the context leaves
  EXPECT_THROW(r.resolve_max_tokens(1000, 1000), ConversionError);
  r = convert(kChat, R"({"model":"m","thinking":{"type":"disabled"},"max_tokens":50,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.resolve_max_tokens(100, 1000), 50u);
  EXPECT_THROW(r.resolve_max_tokens(960, 1000), ConversionError);
  // OpenAI's max_completion_tokens is honoured, and wins over the deprecated max_tokens.
  r = convert(kChat, R"({"model":"m","thinking":{"type":"disabled"},"max_completion_tokens":40,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.resolve_max_tokens(100, 1000), 40u);
  r = convert(kChat, R"({"model":"m","thinking":{"type":"disabled"},"max_tokens":50,"max_completion_tokens":30,"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.resolve_max_tokens(100, 1000), 30u);
  r = convert(kChat, R"({"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})");
  EXPECT_EQ(r.resolve_max_tokens(10, 0), kDefaultMaxTokens);
}

TEST(Convert, ResponsesGroupsCallsByCallId) {
  // Calls of one turn are sorted by call_id and their outputs follow in that order.
  const auto r = convert(kResp, R"({"model":"m","reasoning":{"effort":"none"},"input":[
      {"role":"user","content":"go"},
      {"type":"reasoning","content":[{"type":"reasoning_text","text":"two calls"}]},
      {"type":"function_call","call_id":"c2","name":"f","arguments":"{\"b\":2}"},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},
      {"type":"function_call_output","call_id":"c2","output":"two"},
      {"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"one"}]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]})");
  const auto& m = r.conversation.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1].role, Role::kAssistant);
  EXPECT_EQ(m[1].reasoning_content, "two calls");
  ASSERT_EQ(m[1].tool_calls.size(), 2u);
  EXPECT_EQ(m[1].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].tool_call_id, "c1");
  EXPECT_EQ(m[2].content, "one");
  EXPECT_EQ(m[3].tool_call_id, "c2");
  EXPECT_EQ(m[4].content, "done");
  EXPECT_FALSE(r.conversation.thinking_mode);
}

TEST(Convert, ResponsesCallErrors) {
  EXPECT_EQ(error_of(kResp, R"({"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
      {"role":"user","content":"x"}]})"),
            "No tool output found for tool call c.");
  EXPECT_EQ(error_of(kResp, R"({"model":"m","input":[{"type":"function_call_output","call_id":"z","output":"x"}]})"),
            "No tool call found for tool output with call_id z.");
  EXPECT_EQ(error_of(kResp, R"({"model":"m","input":[]})"), "Input items array must not be empty");
  EXPECT_EQ(error_of(kResp, R"({"model":"m"})"), "Either input or instructions must be provided");
  EXPECT_EQ(error_of(kResp, R"({"model":"m","input":"x","tools":[{"type":"web_search"}]})",
                     ConversionOptions{true, WebSearchBehavior::kReject, WebSearchBehavior::kReject}),
            "Server tools are not supported");
  EXPECT_EQ(error_of(kResp, R"({"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]})"),
            "Unsupported content block");
}

TEST(Convert, ResponsesCustomToolAndNamespaces) {
  auto c = convert_request_text(kResp, R"({"model":"m","input":"x","reasoning":{"effort":"none"},
      "tools":[{"type":"custom","name":"apply_patch"},{"type":"function","name":"other"},
               {"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}],
      "tool_choice":{"type":"custom","name":"apply_patch"}})");
  EXPECT_EQ(c.custom_tool_names, (std::vector<std::string>{"apply_patch"}));
  ASSERT_EQ(c.request.conversation.tools.size(), 1u);
  EXPECT_EQ(c.request.conversation.tools[0].name, "apply_patch");
  EXPECT_EQ(c.request.conversation.tool_choice, ToolChoice::kRequired);
  // A historical call into an undeclared namespace keeps a flattened name of its own.
  c = convert_request_text(kResp, R"({"model":"m","input":[{"role":"user","content":"x"},
      {"type":"function_call","call_id":"c1","namespace":"other","name":"g","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"r"}],
      "tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]})");
  EXPECT_EQ(c.request.conversation.messages[1].tool_calls[0].name, "other::g");
  EXPECT_EQ(c.request.conversation.tools[0].name, "ns::f");
}

TEST(Convert, MessagesPairingAndBlocks) {
  EXPECT_EQ(error_of(kMsg, R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},
      {"role":"user","content":"no result"}]})"),
            "messages.2: `tool_use` ids were found without `tool_result` blocks immediately after: t1. Each "
            "`tool_use` block must have a corresponding `tool_result` block in the next message.");
  EXPECT_EQ(error_of(kMsg, R"({"model":"m","messages":[{"role":"user","content":[]}]})"),
            "messages.0: all messages must have non-empty content");
  EXPECT_EQ(error_of(kMsg, R"({"model":"m","stop_sequences":[""],"messages":[{"role":"user","content":"x"}]})"),
            "stop_sequences must contain at most 16 non-empty strings");
  EXPECT_EQ(error_of(kMsg, R"({"model":"m","tools":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]})"),
            "tools.0: missing input_schema");
  const auto r = convert(kMsg, R"({"model":"m","system":"","output_config":{"effort":"ultra"},"messages":[
      {"role":"system","content":"be nice"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"t1"},{"type":"thinking","thinking":"t2"},{"type":"text","text":"ok"}]}]})");
  const auto& m = r.conversation.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, Role::kSystem);  // the empty top-level system is kept
  EXPECT_EQ(m[1].content, "<system-reminder>\nbe nice\n</system-reminder>");
  EXPECT_EQ(m[2].content, "a");
  EXPECT_EQ(m[3].content, "b");
  EXPECT_EQ(m[4].reasoning_content, "t1\n\nt2");
  EXPECT_EQ(r.conversation.reasoning_effort, ReasoningEffort::kMax);
  // Under Ignore a web_search tool is dropped.
  const auto ignored = convert(kMsg, R"({"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}],
      "messages":[{"role":"user","content":"x"}]})",
                               ConversionOptions{true, WebSearchBehavior::kIgnore, WebSearchBehavior::kIgnore});
  EXPECT_TRUE(ignored.conversation.tools.empty());
}

TEST(Convert, HttpErrorBody) {
  try {
    convert_request_text(kChat, R"({"model":"m","messages":[]})");
    FAIL() << "accepted";
  } catch (const ConversionError& e) {
    EXPECT_EQ(e.http_status(), 400);
    EXPECT_EQ(to_compact_json(e.http_body()),
              R"({"error":{"message":"Empty input messages","type":"invalid_request_error","param":null,"code":"invalid_request_error"}})");
  }
}

}  // namespace
}  // namespace dsinfer::recipe

namespace dsinfer::recipe {
namespace {

TEST(Convert, NestingDepthIsBounded) {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"x"}],"metadata":)" + deep + "}";
  EXPECT_EQ(error_of(Protocol::kChatCompletions, body.c_str()), "invalid JSON body: recursion limit exceeded");
  Json nested = Json::array();
  for (int i = 0; i < 200; ++i) nested = Json::array({nested});
  Json parsed = parse_json(R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  parsed["extra"] = nested;
  try {
    convert_request(Protocol::kChatCompletions, parsed);
    FAIL() << "accepted";
  } catch (const ConversionError& e) {
    EXPECT_STREQ(e.what(), "recursion limit exceeded");
  }
  EXPECT_EQ(json_depth(parse_json("[[1],{\"a\":[2]}]")), 3);
}

}  // namespace
}  // namespace dsinfer::recipe
