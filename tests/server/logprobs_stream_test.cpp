// Logprobs in the protocol streams, fed with real V4 token ids and hand-made numbers (no model): the
// legacy Completions shape, the Chat shape, streamed entries adding up to the body's, token strings of
// tokens that split a UTF-8 character.
#include <gtest/gtest.h>

#include <memory>

#include "recipe/convert.h"
#include "recipe/json_text.h"
#include "server/logprobs_json.h"
#include "server/protocol_streams.h"
#include "v4_tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;

std::vector<Json> data_json(const std::string& sse) {
  std::vector<Json> out;
  size_t pos = 0;
  while ((pos = sse.find("data: ", pos)) != std::string::npos) {
    size_t end = sse.find("\n\n", pos);
    const std::string d = sse.substr(pos + 6, end - pos - 6);
    if (d != "[DONE]") out.push_back(recipe::parse_json(d));
    pos = end + 2;
  }
  return out;
}

// Token i gets logprob -(i + 1) / 4 and alternatives {token 100: -0.1, token 101: -0.2}.
std::vector<engine::TokenLogprobs> made_up(size_t n) {
  std::vector<engine::TokenLogprobs> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i].logprob = -static_cast<float>(i + 1) / 4;
    out[i].top = {{100, -0.1f}, {101, -0.2f}};
  }
  return out;
}

std::string feed(ResponseStream& s, const std::vector<int32_t>& ids) {
  const auto lp = made_up(ids.size());
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    s.logprobs(std::span<const engine::TokenLogprobs>(&lp[i], 1));
    out += s.tokens(std::span<const int32_t>(&ids[i], 1));
  }
  return out;
}

TEST(LogprobsJson, TokenStrings) {
  EXPECT_EQ(logprob_token_string("hello"), "hello");
  EXPECT_EQ(logprob_token_string("\xc3\xa9"), "\xc3\xa9");
  EXPECT_EQ(logprob_token_string("\xe2\x80"), "bytes:\\xe2\\x80");
  EXPECT_EQ(logprob_token_string("a\xff"), "bytes:\\x61\\xff");
}

TEST(CompletionStream, LogprobsInTheBodyAndTheChunks) {
  const auto ids = v4().encode_plain("Hello world, again");
  ASSERT_GE(ids.size(), 3u);
  for (const bool stream : {false, true}) {
    CompletionOptions o;
    o.stream = stream;
    o.logprobs = 2;
    auto s = make_completion_stream(o, v4());
    std::string sse = s->begin(3, 0);
    sse += feed(*s, ids);
    sse += s->end(StreamEnd::kLength, "");
    const Json body = recipe::parse_json(s->body());
    const Json& lp = body["choices"][0]["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), ids.size());
    std::string joined;
    for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
    EXPECT_EQ(joined, "Hello world, again");
    EXPECT_EQ(lp["text_offset"][0], 0);
    EXPECT_EQ(lp["text_offset"][1], lp["tokens"][0].get<std::string>().size());
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_FLOAT_EQ(lp["token_logprobs"][i].get<float>(), -static_cast<float>(i + 1) / 4);
      const Json& top = lp["top_logprobs"][i];
      ASSERT_EQ(top.size(), 2u);
      EXPECT_FLOAT_EQ(top[logprob_token_string(v4().token_bytes(100))].get<float>(), -0.1f);
    }
    if (!stream) continue;
    Json merged = empty_completion_logprobs();
    for (const Json& c : data_json(sse)) {
      if (c["choices"].empty() || c["choices"][0]["logprobs"].is_null()) continue;
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const auto& x : c["choices"][0]["logprobs"][key]) merged[key].push_back(x);
    }
    EXPECT_EQ(merged, lp);
  }
}

TEST(CompletionStream, NoLogprobsUnlessAsked) {
  const auto ids = v4().encode_plain("Hello");
  auto s = make_completion_stream(CompletionOptions{}, v4());
  s->begin(1, 0);
  feed(*s, ids);
  s->end(StreamEnd::kStop, "");
  EXPECT_TRUE(recipe::parse_json(s->body())["choices"][0]["logprobs"].is_null());
}

recipe::ConvertedRequest chat(bool stream) {
  Json body = {{"model", "m"},
               {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})},
               {"stream", stream},
               {"thinking", {{"type", "disabled"}}}};
  return recipe::convert_chat_completions(body);
}

TEST(RecipeStream, ChatLogprobsInTheBodyAndTheChunks) {
  const auto ids = v4().encode_plain("Hello there, friend");
  auto whole = make_recipe_stream(chat(false), "id", "m", false, true, v4());
  whole->begin(3, 0);
  feed(*whole, ids);
  whole->end(StreamEnd::kLength, "");
  const Json body = recipe::parse_json(whole->body());
  const Json& content = body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& e = content[i];
    EXPECT_FLOAT_EQ(e["logprob"].get<float>(), -static_cast<float>(i + 1) / 4);
    std::string bytes;
    for (const auto& b : e["bytes"]) bytes += static_cast<char>(b.get<int>());
    EXPECT_EQ(bytes, v4().token_bytes(ids[i]));
    EXPECT_EQ(e["token"], bytes);
    ASSERT_EQ(e["top_logprobs"].size(), 2u);
    EXPECT_FLOAT_EQ(e["top_logprobs"][1]["logprob"].get<float>(), -0.2f);
  }
  EXPECT_TRUE(body["choices"][0]["logprobs"]["refusal"].is_null());

  auto streamed = make_recipe_stream(chat(true), "id", "m", true, true, v4());
  std::string sse = streamed->begin(3, 0);
  sse += feed(*streamed, ids);
  sse += streamed->end(StreamEnd::kLength, "");
  Json merged = Json::array();
  for (const Json& c : data_json(sse)) {
    if (c["choices"].empty() || c["choices"][0]["logprobs"].is_null()) continue;
    for (const auto& x : c["choices"][0]["logprobs"]["content"]) merged.push_back(x);
  }
  EXPECT_EQ(merged, content);
}

TEST(RecipeStream, ChatHasNoLogprobsUnlessAsked) {
  auto s = make_recipe_stream(chat(false), "id", "m", false, true, v4());
  s->begin(1, 0);
  s->tokens(v4().encode_plain("Hi"));
  s->end(StreamEnd::kStop, "");
  EXPECT_TRUE(recipe::parse_json(s->body())["choices"][0]["logprobs"].is_null());
}

}  // namespace
}  // namespace dsinfer::server
