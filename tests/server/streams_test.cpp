// The ResponseStreams fed with real V4 token ids (no model): text assembly across tokens, stop strings,
// SSE framing and terminators, error events per protocol.
#include <gtest/gtest.h>

#include <memory>

#include "recipe/convert.h"
#include "recipe/json_text.h"
#include "server/protocol_streams.h"
#include "tokenizer/tokenizer.h"
#include "v4_tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;

// "data: X\n\n" frames -> the X texts.
std::vector<std::string> data_lines(const std::string& sse) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    out.push_back(sse.substr(pos + 6, end - pos - 6));
    pos = end + 2;
  }
  return out;
}

std::string feed_one_by_one(ResponseStream& s, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (s.finished()) break;
    out += s.tokens(std::span<const int32_t>(&id, 1));
  }
  return out;
}

TEST(CompletionStream, StopStringEndsTheTextAndIsNotSent) {
  const auto ids = v4().encode_plain("Hello world STOP tail");
  CompletionOptions o;
  o.id = "cmpl-1";
  o.model = "m";
  o.stop = {"STOP"};
  auto s = make_completion_stream(o, v4());
  EXPECT_EQ(s->begin(5, 2), "");
  feed_one_by_one(*s, ids);
  ASSERT_TRUE(s->finished());
  Json body = recipe::parse_json(s->body());
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], "Hello world ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(body["usage"]["prompt_cache_miss_tokens"], 3);
  // Every token up to the one completing the stop string is counted; "tail" never arrives.
  EXPECT_EQ(body["usage"]["completion_tokens"], static_cast<int64_t>(ids.size()) - 1);
}

TEST(CompletionStream, StopStringSplitAcrossTokensIsHeldBack) {
  const auto ids = v4().encode_plain("Hello world again");
  CompletionOptions o;
  o.stream = true;
  o.stop = {"o wor", "zzz"};
  auto s = make_completion_stream(o, v4());
  s->begin(1, 0);
  std::string sse = feed_one_by_one(*s, ids);
  ASSERT_TRUE(s->finished());
  std::string text;
  auto lines = data_lines(sse);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.back(), "[DONE]");
  for (size_t i = 0; i + 1 < lines.size(); ++i) text += recipe::parse_json(lines[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "Hell");
  EXPECT_EQ(recipe::parse_json(lines[lines.size() - 2])["choices"][0]["finish_reason"], "stop");
}

TEST(CompletionStream, SplitUtf8CharacterWaitsForItsLastByte) {
  // 中 = E4 B8 AD, fed as three single-byte tokens.
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xE4\xB8\xAD")) {
    for (int32_t id = 0; id < v4().vocab_size(); ++id)
      if (v4().token_bytes(id) == std::string(1, static_cast<char>(b))) {
        ids.push_back(id);
        break;
      }
  }
  ASSERT_EQ(ids.size(), 3u);
  CompletionOptions o;
  o.stream = true;
  auto s = make_completion_stream(o, v4());
  s->begin(1, 0);
  EXPECT_EQ(s->tokens(std::span<const int32_t>(&ids[0], 1)), "");
  EXPECT_EQ(s->tokens(std::span<const int32_t>(&ids[1], 1)), "");
  auto lines = data_lines(s->tokens(std::span<const int32_t>(&ids[2], 1)));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(recipe::parse_json(lines[0])["choices"][0]["text"], "\xE4\xB8\xAD");
  auto tail = data_lines(s->end(StreamEnd::kLength, ""));
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(recipe::parse_json(tail[0])["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(tail[1], "[DONE]");
  EXPECT_EQ(s->completion_tokens(), 3);
}

TEST(CompletionStream, UsageChunkWhenAsked) {
  CompletionOptions o;
  o.stream = true;
  o.include_usage = true;
  auto s = make_completion_stream(o, v4());
  s->begin(3, 0);
  const auto ids = v4().encode_plain("Hi");
  s->tokens(ids);
  auto tail = data_lines(s->end(StreamEnd::kStop, ""));
  ASSERT_EQ(tail.size(), 3u);
  Json usage = recipe::parse_json(tail[1]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], static_cast<int64_t>(ids.size()));
  EXPECT_EQ(usage["usage"]["total_tokens"], 3 + static_cast<int64_t>(ids.size()));
}

TEST(CompletionStream, ErrorEndsTheStreamWithAnErrorObject) {
  CompletionOptions o;
  o.stream = true;
  auto s = make_completion_stream(o, v4());
  s->begin(3, 0);
  auto lines = data_lines(s->end(StreamEnd::kError, "engine failed"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(recipe::parse_json(lines[0])["error"]["message"], "engine failed");
  EXPECT_EQ(lines[1], "[DONE]");
  EXPECT_EQ(s->finish_reason(), "error");
}

recipe::ConvertedRequest chat(bool stream, bool thinking) {
  Json body = {{"model", "m"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})}, {"stream", stream}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  if (!thinking) body["thinking"] = {{"type", "disabled"}};
  return recipe::convert_chat_completions(body);
}

// OpenAI's shape (the server's default): the finish chunk, then usage in a chunk with "choices":[];
// DeepSeek's (--deepseek-usage-chunk): usage on the finish chunk.
TEST(RecipeStream, ChatStreamEndsWithUsageAndDone) {
  for (const bool separate : {true, false}) {
    auto s = make_recipe_stream(chat(true, false), "id1", "m", true, separate, v4());
    std::string sse = s->begin(7, 0);
    sse += s->tokens(v4().encode_plain("Hello there"));
    sse += s->end(StreamEnd::kStop, "");
    auto lines = data_lines(sse);
    ASSERT_GE(lines.size(), 4u);
    EXPECT_EQ(lines.back(), "[DONE]");
    const Json last = recipe::parse_json(lines[lines.size() - 2]);
    const Json finish = separate ? recipe::parse_json(lines[lines.size() - 3]) : last;
    EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(last["usage"]["prompt_tokens"], 7);
    if (separate) {
      EXPECT_TRUE(last["choices"].empty());
      EXPECT_TRUE(finish["usage"].is_null());
    }
    std::string text;
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      Json c = recipe::parse_json(lines[i]);
      if (c["choices"].empty()) continue;
      if (c["choices"][0]["delta"].contains("content") && c["choices"][0]["delta"]["content"].is_string())
        text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(text, "Hello there");
    EXPECT_EQ(s->finish_reason(), "stop");
    EXPECT_EQ(s->completion_tokens(), 2);
  }
}

TEST(RecipeStream, ChatBodyWhenNotStreaming) {
  auto s = make_recipe_stream(chat(false, true), "id2", "m", false, true, v4());
  EXPECT_EQ(s->begin(4, 1), "");
  EXPECT_EQ(s->tokens(v4().encode("Let me think.</think>Answer.")), "");
  EXPECT_EQ(s->end(StreamEnd::kLength, ""), "");
  Json body = recipe::parse_json(s->body());
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Answer.");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_cache_hit_tokens"], 1);
  EXPECT_EQ(s->finish_reason(), "length");
}

TEST(RecipeStream, ErrorEventsPerProtocol) {
  {
    auto s = make_recipe_stream(chat(true, false), "a", "m", true, true, v4());
    s->begin(1, 0);
    auto lines = data_lines(s->end(StreamEnd::kError, "boom"));
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(recipe::parse_json(lines[0])["error"]["message"], "boom");
    EXPECT_EQ(lines[1], "[DONE]");
  }
  {
    Json body = {{"model", "m"}, {"max_tokens", 5}, {"stream", true},
                 {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})}};
    auto s = make_recipe_stream(recipe::convert_messages(body), "b", "m", true, true, v4());
    s->begin(1, 0);
    std::string sse = s->end(StreamEnd::kCancelled, "shutting down");
    EXPECT_EQ(sse.rfind("event: error\n", 0), 0u) << sse;
    Json e = recipe::parse_json(data_lines(sse).at(0));
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["error"]["type"], "overloaded_error");
    EXPECT_EQ(s->finish_reason(), "cancelled");
  }
  {
    Json body = {{"model", "m"}, {"input", "hi"}, {"stream", true}};
    auto s = make_recipe_stream(recipe::convert_responses(body), "c", "m", true, true, v4());
    std::string start = s->begin(1, 0);
    const size_t events = data_lines(start).size();
    std::string sse = s->end(StreamEnd::kError, "boom");
    Json e = recipe::parse_json(data_lines(sse).at(0));
    EXPECT_EQ(e["type"], "error");
    EXPECT_EQ(e["sequence_number"], static_cast<int64_t>(events)) << "numbers continue after the recipe's events";
  }
}

}  // namespace
}  // namespace dsinfer::server
