// Special tokens in returned text: skipped by default (BOS/EOS spellings never reach a client's content),
// kept with skip_special_tokens = false, and the recipe's own control tokens (</think>) still parsed.
#include <gtest/gtest.h>

#include <memory>

#include "recipe/convert.h"
#include "recipe/json_text.h"
#include "server/protocol_streams.h"
#include "v4_tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;

const std::string kEos = "<｜end▁of▁sentence｜>";

int32_t eos_id() {
  const auto id = v4().added_token_id(kEos);
  EXPECT_TRUE(id.has_value());
  return id.value_or(1);
}

// "Hello" EOS " world" EOS, as an ignore_eos request can produce.
std::vector<int32_t> with_eos(const std::string& a, const std::string& b) {
  std::vector<int32_t> ids = v4().encode_plain(a);
  ids.push_back(eos_id());
  for (int32_t t : v4().encode_plain(b)) ids.push_back(t);
  ids.push_back(eos_id());
  return ids;
}

TEST(SpecialTokens, CompletionTextSkipsThemByDefault) {
  for (const bool skip : {true, false}) {
    CompletionOptions o;
    o.skip_special_tokens = skip;
    auto s = make_completion_stream(o, v4());
    s->begin(1, 0);
    s->tokens(with_eos("Hello", " world"));
    s->end(StreamEnd::kLength, "");
    const Json body = recipe::parse_json(s->body());
    EXPECT_EQ(body["choices"][0]["text"], skip ? "Hello world" : "Hello" + kEos + " world" + kEos) << skip;
    EXPECT_EQ(body["usage"]["completion_tokens"], static_cast<int64_t>(with_eos("Hello", " world").size()));
  }
}

recipe::ConvertedRequest chat_with_thinking(bool thinking) {
  Json body = {{"model", "m"}, {"messages", Json::array({Json{{"role", "user"}, {"content", "hi"}}})}};
  if (!thinking) body["thinking"] = {{"type", "disabled"}};
  return recipe::convert_chat_completions(body);
}

TEST(SpecialTokens, ChatContentSkipsThemByDefault) {
  for (const bool skip : {true, false}) {
    auto s = make_recipe_stream(chat_with_thinking(false), "id", "m", false, true, v4(), skip);
    s->begin(1, 0);
    s->tokens(with_eos("Hello", " there"));
    s->end(StreamEnd::kLength, "");
    const Json body = recipe::parse_json(s->body());
    EXPECT_EQ(body["choices"][0]["message"]["content"], skip ? "Hello there" : "Hello" + kEos + " there" + kEos)
        << skip;
  }
}

TEST(SpecialTokens, TheRecipeStillParsesItsControlTokens) {
  auto s = make_recipe_stream(chat_with_thinking(true), "id", "m", false, true, v4());
  s->begin(1, 0);
  std::vector<int32_t> ids = v4().encode("Let me think.</think>Answer.");
  ids.insert(ids.begin() + 2, eos_id());
  ids.push_back(eos_id());
  s->tokens(ids);
  s->end(StreamEnd::kLength, "");
  const Json body = recipe::parse_json(s->body());
  EXPECT_EQ(body["choices"][0]["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Answer.");
}

}  // namespace
}  // namespace dsinfer::server
