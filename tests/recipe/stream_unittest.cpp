// Protocol generators and the processor's token path beyond the golden corpus: custom tool calls,
// incomplete responses, stop sequences, usage inclusion, multi-token characters, SSE framing.
#include <gtest/gtest.h>

#include <map>

#include "recipe/prompt.h"
#include "recipe/stream/custom_tool_input.h"
#include "recipe/stream/stream_processor.h"

namespace dsinfer::recipe {
namespace {

using namespace stream;

std::string call_block(const std::string& name, const std::string& param, const std::string& value) {
  const std::string dsml = tokens::kDsml;  // ｜DSML｜
  return "<" + dsml + " calls>\n<" + dsml + " invoke name=\"" + name + "\">\n<" + dsml + " parameter name=\"" + param +
         "\" string=\"true\">" + value + "</" + dsml + " parameter>\n</" + dsml + " invoke>\n</" + dsml + " calls>";
}

struct Run {
  std::vector<StreamEvent> events;
  Json response;
};

Run run(Protocol protocol, const char* body, const std::vector<std::string>& chunks,
        InferenceFinish finish = InferenceFinish::kStop) {
  const ConvertedRequest req = convert_request_text(protocol, body);
  StreamProcessor p(make_chunk_generator(protocol, generator_options_for(req, "rid", "model-x")), req.request.parsing_options);
  Run r;
  auto take = [&](std::vector<StreamEvent> e) {
    for (auto& x : e) r.events.push_back(std::move(x));
  };
  take(p.push(InferenceChunk::ready(10, 4, std::string("fp"))));
  for (const auto& c : chunks) take(p.push(InferenceChunk::text_chunk(c, 1)));
  take(p.push(InferenceChunk::finished(finish)));
  r.response = p.response();
  return r;
}

std::vector<std::string> names(const Run& r) {
  std::vector<std::string> n;
  for (const auto& e : r.events) n.push_back(e.name);
  return n;
}

TEST(ResponsesGenerator, CustomToolCallStreamsDecodedInput) {
  const std::string patch = "*** Begin Patch\n*** Add File: a.txt\n+say \"hi\"\n*** End Patch";
  const auto r = run(Protocol::kResponses,
                     R"({"model":"m","input":"x","reasoning":{"effort":"none"},"tools":[{"type":"custom","name":"apply_patch"}]})",
                     {call_block("apply_patch", "input", patch)});
  std::string streamed;
  bool added = false, done = false;
  for (const auto& e : r.events) {
    if (e.name == "response.output_item.added") {
      EXPECT_EQ(e.data["item"]["type"], "custom_tool_call");
      EXPECT_EQ(e.data["item"]["id"], "ctc_rid_0");
      EXPECT_EQ(e.data["item"]["call_id"], "call_rid_0");
      EXPECT_EQ(e.data["item"]["input"], "");
      added = true;
    }
    if (e.name == "response.custom_tool_call_input.delta") streamed += e.data["delta"].get<std::string>();
    if (e.name == "response.custom_tool_call_input.done") {
      EXPECT_EQ(e.data["input"], patch);
      done = true;
    }
  }
  EXPECT_TRUE(added && done);
  EXPECT_EQ(streamed, patch);
  EXPECT_EQ(r.response["output"][0]["input"], patch);
  EXPECT_EQ(r.response["status"], "completed");
}

TEST(ResponsesGenerator, LengthFinishIsIncomplete) {
  const auto r = run(Protocol::kResponses, R"({"model":"m","input":"x","reasoning":{"effort":"none"}})", {"Hello"},
                     InferenceFinish::kLength);
  EXPECT_EQ(names(r).back(), "response.incomplete");
  EXPECT_EQ(r.response["status"], "incomplete");
  EXPECT_EQ(r.response["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(r.response["output"][0]["status"], "incomplete");
  EXPECT_EQ(r.response["usage"]["input_tokens_details"]["cached_tokens"], 4);
  int64_t seq = 0;
  for (const auto& e : r.events) EXPECT_EQ(e.data["sequence_number"], seq++);
}

TEST(ResponsesGenerator, MessageBeforeToolCallIsCommentary) {
  const auto r = run(Protocol::kResponses,
                     R"({"model":"m","input":"x","reasoning":{"effort":"none"},"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]})",
                     {"Checking.\n\n" + call_block("f", "q", "v")});
  ASSERT_EQ(r.response["output"].size(), 2u);
  EXPECT_EQ(r.response["output"][0]["phase"], "commentary");
  EXPECT_EQ(r.response["output"][1]["arguments"], "{\"q\": \"v\"}");
}

TEST(MessagesGenerator, StopSequenceAndUsage) {
  const auto r = run(Protocol::kMessages,
                     R"({"model":"m","max_tokens":10,"thinking":{"type":"disabled"},"stop_sequences":["END"],"messages":[{"role":"user","content":"x"}]})",
                     {"one two E", "ND three"});
  const Json& delta = r.events[r.events.size() - 2].data;
  EXPECT_EQ(delta["type"], "message_delta");
  EXPECT_EQ(delta["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(delta["delta"]["stop_sequence"], "END");
  EXPECT_EQ(delta["usage"]["input_tokens"], 6);  // 10 prompt tokens, 4 of them cached
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(delta["usage"]["output_tokens"], 2);
  EXPECT_EQ(to_compact_json(r.response["content"]), R"([{"type":"text","text":"one two "}])");
  EXPECT_EQ(r.response["stop_sequence"], "END");
}

TEST(ChatGenerator, UsageOnlyOnTheFinalChunkWithoutIncludeUsage) {
  const auto r = run(Protocol::kChatCompletions,
                     R"({"model":"m","stream":true,"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})",
                     {"Hi"});
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_FALSE(r.events[0].data.contains("usage"));
  EXPECT_FALSE(r.events[1].data.contains("usage"));
  EXPECT_EQ(r.events[2].data["usage"]["prompt_cache_miss_tokens"], 6);
  EXPECT_EQ(r.events[2].data["system_fingerprint"], "fp");
  EXPECT_EQ(sse_frame(r.events[1]).rfind("data: {\"id\":\"rid\"", 0), 0u);
  EXPECT_EQ(sse_done_frame(), "data: [DONE]\n\n");
  StreamEvent named{"message_stop", parse_json(R"({"type":"message_stop"})")};
  EXPECT_EQ(sse_frame(named), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

// OpenAI's shape: the finish chunk has "usage":null (include_usage) or no usage key, and usage comes in a
// chunk of its own with "choices":[] only when include_usage is set.
TEST(ChatGenerator, SeparateUsageChunk) {
  for (const bool include_usage : {false, true}) {
    const std::string body = std::string(R"({"model":"m","stream":true,"thinking":{"type":"disabled"},)") +
                             (include_usage ? R"("stream_options":{"include_usage":true},)" : "") +
                             R"("messages":[{"role":"user","content":"x"}]})";
    const ConvertedRequest req = convert_request_text(Protocol::kChatCompletions, body);
    GeneratorOptions o = generator_options_for(req, "id", "m");
    o.separate_usage_chunk = true;
    StreamProcessor p(make_chunk_generator(req.protocol, o), req.request.parsing_options);
    std::vector<StreamEvent> events = p.push(InferenceChunk::ready(6, 2));
    for (auto& e : p.push(InferenceChunk::text_chunk("Hi", 1))) events.push_back(std::move(e));
    for (auto& e : p.push(InferenceChunk::finished(InferenceFinish::kStop))) events.push_back(std::move(e));
    ASSERT_EQ(events.size(), include_usage ? 4u : 3u);
    const Json& finish = events[2].data;
    EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(finish.contains("usage"), include_usage);
    if (include_usage) {
      EXPECT_TRUE(finish["usage"].is_null());
      const Json& last = events[3].data;
      EXPECT_EQ(last["object"], "chat.completion.chunk");
      EXPECT_TRUE(last["choices"].is_array() && last["choices"].empty());
      EXPECT_EQ(last["usage"]["prompt_tokens"], 6);
      EXPECT_EQ(last["usage"]["completion_tokens"], 1);
    }
    EXPECT_EQ(p.response()["usage"]["completion_tokens"], 1);
  }
}

// A fake tokenizer: each id is some bytes; decode lossy-replaces an incomplete trailing character.
std::string fake_decode(std::span<const int32_t> ids) {
  static const std::map<int32_t, std::string> bytes = {
      {1, "Hi "}, {2, "\xE4"}, {3, "\xB8\xAD"}, {4, "</think>"}, {5, "!"}, {7, "\xF0\x9F"}, {8, "\x98\x80"}};
  std::string out;
  for (int32_t id : ids)
    if (auto it = bytes.find(id); it != bytes.end()) out += it->second;
  // Replace an incomplete UTF-8 tail with U+FFFD, as a byte-level decoder does.
  size_t i = out.size();
  while (i > 0 && (static_cast<unsigned char>(out[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) {
    const unsigned char lead = static_cast<unsigned char>(out[i - 1]);
    const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (out.size() - (i - 1) < need) out = out.substr(0, i - 1) + "\xEF\xBF\xBD";
  }
  return out;
}

TEST(StreamProcessor, TokenPathBuffersIncompleteCharacters) {
  const ConvertedRequest req = convert_request_text(
      Protocol::kChatCompletions, R"({"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})");
  StreamProcessor p(make_chunk_generator(req.protocol, generator_options_for(req, "id", "m")), req.request.parsing_options);
  p.set_token_decoder(fake_decode);
  std::vector<std::string> contents;
  auto take = [&](std::vector<StreamEvent> events) {
    for (auto& e : events) {
      const Json& d = e.data["choices"][0]["delta"];
      if (d.contains("content") && d["content"].is_string() && !d.contains("role") && e.data["choices"][0]["finish_reason"].is_null())
        contents.push_back(d["content"].get<std::string>());
    }
  };
  const std::vector<int32_t> ids = {1, 2, 3, 99, 4, 7, 8, 5};
  take(p.push_tokens(ids));
  take(p.push(InferenceChunk::finished(InferenceFinish::kStop)));
  // "\xE4" waits for its second half; unknown id 99 decodes to nothing and waits with the next id.
  EXPECT_EQ(contents, (std::vector<std::string>{"Hi ", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "!"}));
  // Every id that contributed to emitted text counts, buffered ones included (99 rides with </think>).
  EXPECT_EQ(p.completion_usage().completion_tokens, 8);
  EXPECT_EQ(p.response()["choices"][0]["message"]["content"], "Hi \xE4\xB8\xAD\xF0\x9F\x98\x80!");
}

// A completion cut off inside a character (length limit) or ending in unknown ids still reports every
// generated token, and the cut-off character as U+FFFD.
TEST(StreamProcessor, BufferedTokensAtTheEndAreOutput) {
  const ConvertedRequest req = convert_request_text(
      Protocol::kChatCompletions, R"({"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"}]})");
  for (const bool unknown_tail : {false, true}) {
    StreamProcessor p(make_chunk_generator(req.protocol, generator_options_for(req, "id", "m")),
                      req.request.parsing_options);
    p.set_token_decoder(fake_decode);
    const std::vector<int32_t> ids = unknown_tail ? std::vector<int32_t>{1, 99, 98} : std::vector<int32_t>{1, 7};
    p.push_tokens(ids);
    const auto events = p.push(InferenceChunk::finished(InferenceFinish::kLength));
    ASSERT_FALSE(events.empty());
    EXPECT_EQ(events.back().data["usage"]["completion_tokens"], 3 - !unknown_tail);
    EXPECT_EQ(p.completion_usage().completion_tokens, 3 - !unknown_tail);
    EXPECT_EQ(p.response()["choices"][0]["message"]["content"], unknown_tail ? "Hi " : "Hi \xEF\xBF\xBD");
    EXPECT_EQ(p.response()["choices"][0]["finish_reason"], "length");
  }
}

TEST(StreamProcessor, TokenWithoutDecoderIsAnError) {
  const ConvertedRequest req =
      convert_request_text(Protocol::kChatCompletions, R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  StreamProcessor p(make_chunk_generator(req.protocol, generator_options_for(req, "id", "m")), req.request.parsing_options);
  EXPECT_THROW(p.push(InferenceChunk::token(5)), StreamError);
  EXPECT_TRUE(p.finished());
}

TEST(CustomToolInput, DecodesAcrossPieces) {
  CustomToolInputDecoder d;
  std::string out;
  for (const char* piece : {"{", "\"input\"", ": ", "\"", "a\\n", "\\u00", "e9 \\ud83d", "\\ude00", "\\\"q", "\"", "}"})
    out += d.feed(piece);
  out += d.finish();
  EXPECT_EQ(out, "a\n\xC3\xA9 \xF0\x9F\x98\x80\"q");
  CustomToolInputDecoder other;
  std::string passed = other.feed("{\"path\": 1}");
  passed += other.finish();
  EXPECT_EQ(passed, "{\"path\": 1}");  // not {"input": ...}: passes through
}

}  // namespace
}  // namespace dsinfer::recipe
