// Strict tool calls: the DSML tool-call grammar accepts what the recipe renders for a historical
// assistant turn (the syntax the model was trained on), for several schemas and both prompt versions,
// and rejects calls whose tool, parameters or values break the schemas. Over the real V4 vocabulary,
// random walks through the masks end in text that the recipe's stream parser turns into tool calls
// whose arguments hold what the schema asks for.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "grammar/test_util.h"
#include "grammar/token_matcher.h"
#include "grammar/tool_calls.h"
#include "recipe/convert.h"
#include "recipe/prompt.h"
#include "recipe/stream/stream_processor.h"
#include "tokenizer/tokenizer_files.h"

namespace dsinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
using testing::matches;

const std::string kMarker = kDsmlMarker;

const std::vector<ToolSpec>& tools() {
  static const std::vector<ToolSpec> kTools = {
      {"get_weather", Json::parse(R"j({"type":"object","properties":{"city":{"type":"string","description":"City"},
         "days":{"type":"integer","minimum":1,"maximum":14},"unit":{"enum":["C","F"]}},"required":["city"]})j")},
      {"create_event", Json::parse(R"j({"type":"object","$defs":{"person":{"type":"object","properties":{
         "name":{"type":"string","maxLength":20},"email":{"type":"string","format":"email"}},"required":["name"]}},
         "properties":{"title":{"type":"string"},"when":{"type":"string","format":"date"},
         "attendees":{"type":"array","items":{"$ref":"#/$defs/person"},"maxItems":3},
         "priority":{"type":["number","null"]},"all_day":{"type":"boolean"}},
         "required":["title","when","attendees"],"additionalProperties":false})j")},
      {"ping", Json::parse(R"j({"type":"object","properties":{},"additionalProperties":false})j")},
  };
  return kTools;
}

std::shared_ptr<const Grammar> grammar(const ToolCallGrammarOptions& o, std::vector<ToolSpec> t = tools()) {
  return std::make_shared<const Grammar>(tool_call_grammar(t, o));
}

ToolCallTags tags_for(recipe::PromptVersion v) {
  if (v == recipe::PromptVersion::kV4) return {"tool_calls", "invoke", "parameter"};
  return {};
}

// The assistant turn the recipe renders for `content` and these calls, from the end of thinking to
// (not including) the end of sentence: what the model writes.
std::string rendered_answer(recipe::PromptVersion v, const std::string& content,
                            const std::vector<recipe::ToolCall>& calls) {
  recipe::Conversation c;
  c.thinking_mode = false;
  c.messages.push_back(recipe::InputMessage::user("Plan my day."));
  c.messages.push_back(recipe::InputMessage::assistant(content, {}, calls));
  c.messages.push_back(recipe::InputMessage::user("Thanks."));
  const std::string prompt = recipe::render_conversation(c, v).prompt;
  const std::string eos = recipe::tokens::kEos;
  const size_t end = prompt.find(eos);
  const size_t begin = prompt.rfind(recipe::tokens::kThinkEnd, end) + std::string(recipe::tokens::kThinkEnd).size();
  return prompt.substr(begin, end - begin);
}

const std::vector<std::vector<recipe::ToolCall>>& valid_calls() {
  static const std::vector<std::vector<recipe::ToolCall>> kCalls = {
      {{"c1", "get_weather", R"j({"city": "Paris", "days": 2})j"}},
      {{"c1", "get_weather", R"j({"city": "São Paulo <br/> </x> a</b", "unit": "F"})j"},
       {"c2", "ping", "{}"}},
      {{"c1", "create_event", R"j({"title": "Lunch", "when": "2026-12-01", "attendees": [{"name": "Ada",
         "email": "ada@example.org"}, {"name": "Bob"}], "priority": 1.5, "all_day": false})j"}},
      {{"c1", "create_event", R"j({"title": "", "when": "2026-01-31", "attendees": [], "priority": null})j"},
       {"c2", "get_weather", R"j({"city": "Tokyo"})j"}},
  };
  return kCalls;
}

TEST(ToolCallGrammar, AcceptsRecipeRenderedCalls) {
  for (auto v : {recipe::PromptVersion::kV4, recipe::PromptVersion::kV41}) {
    ToolCallGrammarOptions o;
    o.tags = tags_for(v);
    auto automatic = grammar(o);
    o.inside_block = true;
    auto required = grammar(o);
    const std::string open = "<" + kMarker + o.tags.block + ">\n";
    for (const auto& calls : valid_calls()) {
      for (const std::string content : {"", "Let me check."}) {
        const std::string answer = rendered_answer(v, content, calls);
        EXPECT_TRUE(matches(automatic, answer)) << answer;
        const size_t at = answer.find(open);
        ASSERT_NE(at, std::string::npos) << answer;
        EXPECT_TRUE(matches(required, answer.substr(at + open.size()))) << answer;
      }
    }
    // Plain text is an answer too when the model may choose (auto), never when it must call.
    EXPECT_TRUE(matches(automatic, "It is sunny <b>today</b> (</think> is text here)."));
    EXPECT_TRUE(matches(automatic, ""));
    EXPECT_FALSE(matches(required, ""));
    EXPECT_FALSE(matches(required, "It is sunny."));
  }
}

// Messages tool_choice "any": the prompt opens no block (auto in the recipe), yet a call must come: the
// block from its marker, after the template's "\n\n" or nothing, and no text before it.
TEST(ToolCallGrammar, RequireCallForcesTheBlockWithoutText) {
  for (auto v : {recipe::PromptVersion::kV4, recipe::PromptVersion::kV41}) {
    ToolCallGrammarOptions o;
    o.tags = tags_for(v);
    o.require_call = true;
    auto any = grammar(o);
    for (const auto& calls : valid_calls()) {
      const std::string answer = rendered_answer(v, "", calls);  // "\n\n<｜DSML｜block>..."
      EXPECT_TRUE(matches(any, answer)) << answer;
      EXPECT_TRUE(matches(any, answer.substr(2))) << answer;
      EXPECT_FALSE(matches(any, rendered_answer(v, "Let me check.", calls))) << "text before the block";
    }
    EXPECT_FALSE(matches(any, ""));
    EXPECT_FALSE(matches(any, "It is sunny."));
    o.thinking = true;
    auto thinking = grammar(o);
    const std::string answer = rendered_answer(v, "", valid_calls()[0]);
    EXPECT_TRUE(matches(thinking, "Weather: call the tool.</think>" + answer));
    EXPECT_FALSE(matches(thinking, "Weather.</think>It is sunny."));
  }
}

// Responses tools that do not say strict: strict when their schema can be enforced, else the frame
// only (any parameters) instead of the error an explicit strict: true gets.
TEST(ToolCallGrammar, StrictIfPossibleFallsBackToTheFrame) {
  const Json unsupported = Json::parse(R"j({"type":"object","properties":{"a":{"not":{"type":"string"}}}})j");
  ToolCallGrammarOptions o;
  o.inside_block = true;
  EXPECT_THROW(tool_call_grammar({{"f", unsupported}}, o), core::Error);
  ToolSpec lenient{"f", unsupported};
  lenient.strict_if_possible = true;
  auto g = grammar(o, {lenient});
  const std::string call = "<" + kMarker + o.tags.invoke + " name=\"f\">\n<" + kMarker + o.tags.parameter +
                           " name=\"zzz\" string=\"true\">anything</" + kMarker + o.tags.parameter + ">\n</" +
                           kMarker + o.tags.invoke + ">\n</" + kMarker + o.tags.block + ">";
  EXPECT_TRUE(matches(g, call));
  // A schema that compiles stays strict: an unknown parameter is refused.
  ToolSpec weather = tools()[0];
  weather.strict_if_possible = true;
  auto w = grammar(o, {weather});
  const std::string wcall = "<" + kMarker + o.tags.invoke + " name=\"get_weather\">\n<" + kMarker +
                            o.tags.parameter + " name=\"zzz\" string=\"true\">x</" + kMarker + o.tags.parameter +
                            ">\n</" + kMarker + o.tags.invoke + ">\n</" + kMarker + o.tags.block + ">";
  EXPECT_FALSE(matches(w, wcall));
}

TEST(ToolCallGrammar, RejectsCallsThatBreakTheSchemas) {
  ToolCallGrammarOptions o;
  o.inside_block = true;
  auto g = grammar(o);
  const std::string p = "<" + kMarker + " parameter name=\"";
  const std::string pe = "</" + kMarker + " parameter>";
  auto call = [&](const std::string& name, const std::string& params) {
    return "<" + kMarker + " invoke name=\"" + name + "\">\n" + params + "\n</" + kMarker + " invoke>\n</" + kMarker +
           " calls>";
  };
  const std::string city = p + "city\" string=\"true\">Paris" + pe;
  ASSERT_TRUE(matches(g, call("get_weather", city)));
  ASSERT_TRUE(matches(g, call("get_weather", p + "city\" string=\"false\">\"Paris\"" + pe)));
  ASSERT_TRUE(matches(g, call("get_weather", city + "\n" + p + "days\" string=\"false\">14" + pe)));
  // String schemas take raw text as the recipe renders it (string="true"), as far as the schema allows.
  ASSERT_TRUE(matches(g, call("get_weather", city + "\n" + p + "unit\" string=\"true\">F" + pe)));
  ASSERT_TRUE(matches(g, call("get_weather", city + "\n" + p + "unit\" string=\"false\">\"F\"" + pe)));
  for (const std::string& bad : {
           call("get_wether", city),                                              // unknown tool
           call("get_weather", ""),                                               // required city missing
           call("get_weather", p + "town\" string=\"true\">Paris" + pe),          // unknown parameter
           call("get_weather", city + "\n" + p + "days\" string=\"false\">15" + pe),   // above maximum
           call("get_weather", city + "\n" + p + "days\" string=\"true\">2" + pe),     // integer as raw text
           call("get_weather", city + "\n" + p + "unit\" string=\"true\">K" + pe),     // not in the enum (raw)
           call("get_weather", city + "\n" + p + "unit\" string=\"false\">\"K\"" + pe),  // not in the enum
           call("get_weather", p + "days\" string=\"false\">2" + pe + "\n" + city),   // not in schema order
           call("get_weather", city + "\n" + city),                               // repeated
           call("get_weather", p + "city\" string=\"false\">Paris" + pe),         // not JSON
           call("get_weather", p + "city\" string=\"true\">a</" + kMarker + " invoke>" + pe),  // ends the value early
           call("create_event", p + "title\" string=\"true\">x" + pe),            // when, attendees missing
           call("create_event", p + "title\" string=\"true\">x" + pe + "\n" + p + "when\" string=\"true\">2026-13-01" + pe +
                                    "\n" + p + "attendees\" string=\"false\">[]" + pe),   // not a date (raw)
           call("ping", city),                                                    // ping takes nothing
       }) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
  // JSON strings write '<' escaped: a raw "</｜DSML｜" inside one would end the value for the parser.
  auto event = [&](const std::string& name) {
    return call("create_event", p + "title\" string=\"true\">x" + pe + "\n" + p + "when\" string=\"false\">\"2026-01-01\"" +
                                    pe + "\n" + p + "attendees\" string=\"false\">[{\"name\": \"" + name + "\"}]" + pe);
  };
  EXPECT_TRUE(matches(g, event("a\\u003cb")));
  EXPECT_FALSE(matches(g, event("a<b")));
  EXPECT_FALSE(matches(g, event("a</" + kMarker + " parameter>")));
  // One call only when parallel tool use is off.
  const std::string two = "<" + kMarker + " invoke name=\"ping\">\n\n</" + kMarker + " invoke>\n" + call("ping", "");
  EXPECT_TRUE(matches(g, two));
  o.single_call = true;
  EXPECT_FALSE(matches(grammar(o), two));
  EXPECT_TRUE(matches(grammar(o), call("ping", "")));
}

TEST(ToolCallGrammar, TextNeverOpensAMarkerTheParserWouldRead) {
  ToolCallGrammarOptions o;
  auto g = grammar(o);
  EXPECT_TRUE(matches(g, "a <" + kMarker.substr(0, 3) + "DSM> b <<|DSML|"));
  EXPECT_FALSE(matches(g, "a <" + kMarker + " thing"));
  EXPECT_FALSE(matches(g, "<<" + kMarker + " calls>\n"));
  o.thinking = true;
  auto t = grammar(o);
  EXPECT_TRUE(matches(t, "Two cities. <thi </thinkx</think>Sunny."));
  EXPECT_TRUE(matches(t, "</think>"));
  EXPECT_FALSE(matches(t, "Sunny."));                                  // reasoning must end
  EXPECT_FALSE(matches(t, "x <" + kMarker + " calls></think>"));      // no call inside reasoning
  EXPECT_TRUE(matches(t, "x</think>" + rendered_answer(recipe::PromptVersion::kV41, "", valid_calls()[0])));
}

TEST(ToolCallGrammar, ErrorsNameTheToolAndWhat) {
  auto error_of = [](ToolSpec t) {
    try {
      tool_call_grammar({std::move(t)}, {});
    } catch (const core::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({"f", Json::parse(R"j({"type":"object","anyOf":[{"required":["a"]}]})j")}).find("'anyOf' at the top level"),
            std::string::npos);
  EXPECT_NE(error_of({"f", Json::parse(R"j({"type":"object","properties":{"a":{"not":{}}}})j")}).find("strict tool 'f': json schema at #/properties/a: unsupported keyword 'not'"),
            std::string::npos);
  EXPECT_NE(error_of({"f", Json::parse(R"j({"type":"object","properties":{"a\"b":{}}})j")}).find("parameter name 'a\"b'"),
            std::string::npos);
  EXPECT_NE(error_of({"f", Json::parse(R"j({"type":"array"})j")}).find("must be of type object"), std::string::npos);
  // A non-strict tool keeps the frame with any parameters.
  auto g = std::make_shared<const Grammar>(tool_call_grammar({{"f", Json::parse(R"j({"type":"object","properties":{"a":{"not":{}}}})j"), false}},
                                                             {.tags = {}, .inside_block = true}));
  EXPECT_TRUE(matches(g, "<" + kMarker + " invoke name=\"f\">\n<" + kMarker + " parameter name=\"zz\" string=\"false\">[1, 2]</" +
                             kMarker + " parameter>\n</" + kMarker + " invoke>\n</" + kMarker + " calls>"));
}

using testing::v4;

std::shared_ptr<const Vocabulary> tool_vocab() {
  static auto vocab = Vocabulary::from_tokenizer(v4(), {1}, {kDsmlMarker, kThinkEndText});
  return vocab;
}

TEST(ToolCallGrammar, V4TokensOfRenderedCallsAreAccepted) {
  // The prompt encoder's ids of a rendered turn (｜DSML｜ as its added token) pass the masks one by one.
  ToolCallGrammarOptions o;
  o.tags = tags_for(recipe::PromptVersion::kV4);
  auto g = grammar(o);
  TokenMask mask((tool_vocab()->size() + 31) / 32);
  const int32_t marker = *v4().added_token_id(kMarker);
  for (const auto& calls : valid_calls()) {
    const std::string answer = rendered_answer(recipe::PromptVersion::kV4, "Sure.", calls);
    std::vector<tokenizer::SpecialRange> specials;
    for (size_t at = answer.find(kMarker); at != std::string::npos; at = answer.find(kMarker, at + 1)) {
      specials.push_back({at, at + kMarker.size()});
    }
    const std::vector<int32_t> ids = v4().encode_with_specials(answer, specials);
    ASSERT_NE(std::find(ids.begin(), ids.end(), marker), ids.end());
    TokenMatcher m(g, tool_vocab());
    for (size_t i = 0; i < ids.size(); ++i) {
      m.fill_mask(mask);
      ASSERT_TRUE(mask_allows(mask, ids[i])) << answer << ": token " << i;
      ASSERT_TRUE(m.accept_token(ids[i])) << answer << ": token " << i;
    }
    m.fill_mask(mask);
    EXPECT_TRUE(mask_allows(mask, 1)) << answer;
  }
}

TEST(ToolCallGrammar, RandomWalksParseIntoCallsThatHoldTheSchema) {
  // Chat request with required tool choice (the prompt opens the block); seeded walks over the masks,
  // then the recipe's stream parser assembles the calls: arguments are JSON objects with what the
  // schema requires. (ajv checks the same through the server: tests/e2e/strict_tools.test.mjs.)
  const Json body = Json::parse(R"j({"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"required",
    "thinking":{"type":"disabled"},
    "tools":[{"type":"function","function":{"name":"set","strict":true,"parameters":{"type":"object",
      "properties":{"mode":{"enum":["on","off"]},"level":{"type":"integer","minimum":0,"maximum":9},
      "tags":{"type":"array","items":{"type":"boolean"},"maxItems":2},"note":{"type":["string","null"],"maxLength":3}},
      "required":["mode","level"]}}}]})j");
  const recipe::ConvertedRequest conv = recipe::convert_request(recipe::Protocol::kChatCompletions, body);
  ASSERT_TRUE(conv.request.parsing_options.tool_call_initial_stage);
  ToolCallGrammarOptions o;
  o.tags = tags_for(recipe::PromptVersion::kV4);
  o.inside_block = true;
  auto g = grammar(o, {{"set", body["tools"][0]["function"]["parameters"]}});
  std::mt19937 rng(77);
  TokenMask mask((tool_vocab()->size() + 31) / 32);
  int finished = 0;
  for (int walk = 0; walk < 12; ++walk) {
    TokenMatcher m(g, tool_vocab());
    std::vector<int32_t> ids;
    for (int step = 0; step < 300 && !m.terminated(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < tool_vocab()->size(); ++id) {
        if (mask_allows(mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (mask_allows(mask, 1)) pick = 1;
      ASSERT_TRUE(m.accept_token(pick));
      if (pick != 1) ids.push_back(pick);
    }
    if (!m.terminated()) continue;
    ++finished;
    recipe::stream::StreamProcessor p(
        recipe::stream::make_chunk_generator(conv.protocol, recipe::stream::generator_options_for(conv, "id", "m")),
        conv.request.parsing_options);
    p.set_token_decoder([](std::span<const int32_t> t) { return v4().decode(t, false); });
    p.push(recipe::stream::InferenceChunk::ready(1, 0));
    p.push_tokens(ids);
    p.push(recipe::stream::InferenceChunk::finished(recipe::stream::InferenceFinish::kStop));
    const Json response = p.response();
    const std::string text = v4().decode(ids, false);
    const Json& message = response["choices"][0]["message"];
    ASSERT_TRUE(message.contains("tool_calls")) << text << "\n" << response.dump();
    for (const Json& call : message["tool_calls"]) {
      EXPECT_EQ(call["function"]["name"], "set");
      const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
      ASSERT_TRUE(args.is_object()) << text;
      ASSERT_TRUE(args.contains("mode") && args.contains("level")) << text;
      EXPECT_TRUE(args["mode"] == "on" || args["mode"] == "off") << text;
      EXPECT_TRUE(args["level"].is_number_integer() && args["level"] >= 0 && args["level"] <= 9) << text;
      for (const auto& [key, value] : args.items()) {
        EXPECT_TRUE(key == "mode" || key == "level" || key == "tags" || key == "note") << text;
        if (key == "tags") {
          EXPECT_TRUE(value.is_array() && value.size() <= 2) << text;
        }
        if (key == "note") {
          EXPECT_TRUE(value.is_null() || (value.is_string() && value.get<std::string>().size() <= 12)) << text;
        }
      }
    }
  }
  EXPECT_GE(finished, 6);
}

}  // namespace
}  // namespace dsinfer::grammar
