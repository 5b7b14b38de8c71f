// n > 1: the choices' bodies merged into one OpenAI response.
#include "server/choice_merge.h"
#include "server/choice_sse.h"

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

TEST(ChoiceSse, ReindexesFramesAndEndsOnce) {
  ChoiceSseMerger m;
  const std::string a = R"(data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}],"usage":null})" "\n\n";
  EXPECT_EQ(m.rewrite(a, 1),
            R"(data: {"id":"c","choices":[{"index":1,"delta":{"content":"x"}}],"usage":null})" "\n\n");
  const std::string last = R"(data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}})"
                           "\n\ndata: [DONE]\n\n";
  EXPECT_EQ(m.rewrite(last, 0), "");
  EXPECT_EQ(m.rewrite(last, 1), "");
  EXPECT_EQ(m.finish(), R"(data: {"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}})"
                        "\n\ndata: [DONE]\n\n");
}

TEST(ChoiceSse, UsageOnAChoiceChunkMovesToTheEnd) {
  ChoiceSseMerger m;
  const std::string f = R"(data: {"choices":[{"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":3}})" "\n\n";
  EXPECT_EQ(m.rewrite(f, 2), R"(data: {"choices":[{"index":2,"finish_reason":"length"}],"usage":null})" "\n\n");
  const Json end = recipe::parse_json(m.finish().substr(6, m.finish().find("\n\n") - 6));
  EXPECT_EQ(end["usage"]["completion_tokens"], 3);
  EXPECT_EQ(end["usage"]["total_tokens"], 4);
  EXPECT_TRUE(end["choices"].empty());
}

}  // namespace
}  // namespace dsinfer::server
