// n > 1: the choices' bodies merged into one OpenAI response.
#include "server/choice_merge.h"

#include <gtest/gtest.h>

#include "recipe/json_text.h"

namespace dsinfer::server {
namespace {

using Json = recipe::Json;

TEST(ChoiceMerge, IndexesChoicesAndCountsThePromptOnce) {
  const std::string a =
      R"({"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"}],)"
      R"("usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9,"completion_tokens_details":{"reasoning_tokens":1}}})";
  const std::string b =
      R"({"id":"chatcmpl-x","object":"chat.completion","choices":[{"index":0,"message":{"content":"bb"},"finish_reason":"length"}],)"
      R"("usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12,"completion_tokens_details":{"reasoning_tokens":3}}})";
  const Json m = recipe::parse_json(merge_choice_bodies({a, b, a}));
  ASSERT_EQ(m["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m["choices"][i]["index"], i);
  EXPECT_EQ(m["choices"][1]["message"]["content"], "bb");
  EXPECT_EQ(m["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(m["id"], "chatcmpl-x");
  EXPECT_EQ(m["usage"]["prompt_tokens"], 7);
  EXPECT_EQ(m["usage"]["completion_tokens"], 9);
  EXPECT_EQ(m["usage"]["total_tokens"], 16);
  EXPECT_EQ(m["usage"]["completion_tokens_details"]["reasoning_tokens"], 5);
}

TEST(ChoiceMerge, CompletionsShape) {
  const std::string a = R"({"object":"text_completion","choices":[{"text":"x","index":0}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}})";
  const Json m = recipe::parse_json(merge_choice_bodies({a, a}));
  ASSERT_EQ(m["choices"].size(), 2u);
  EXPECT_EQ(m["choices"][1]["index"], 1);
  EXPECT_EQ(m["usage"]["completion_tokens"], 8);
  EXPECT_EQ(m["usage"]["total_tokens"], 11);
  EXPECT_FALSE(m["usage"].contains("completion_tokens_details"));
}

TEST(ChoiceMerge, BestOfKeepsTheChosenBodiesAndBillsThemAll) {
  auto body = [](const char* text, int tokens) {
    return std::string(R"({"object":"text_completion","choices":[{"text":")") + text +
           R"(","index":0}],"usage":{"prompt_tokens":3,"completion_tokens":)" + std::to_string(tokens) +
           R"(,"total_tokens":0}})";
  };
  const Json m = recipe::parse_json(merge_choice_bodies({body("a", 1), body("b", 2), body("c", 4)}, {2, 0}));
  ASSERT_EQ(m["choices"].size(), 2u);
  EXPECT_EQ(m["choices"][0]["text"], "c");
  EXPECT_EQ(m["choices"][0]["index"], 0);
  EXPECT_EQ(m["choices"][1]["text"], "a");
  EXPECT_EQ(m["choices"][1]["index"], 1);
  EXPECT_EQ(m["usage"]["completion_tokens"], 7);
  EXPECT_EQ(m["usage"]["total_tokens"], 10);
}

}  // namespace
}  // namespace dsinfer::server
