// The output parser against the spec's parser vectors (§5.7) and, for each of them, every way of splitting
// the model output into two or three chunks and one byte per chunk: the concatenated reasoning, text, tool
// calls and arguments must not depend on where the chunks were cut.
#include <gtest/gtest.h>

#include "recipe/json_text.h"
#include "recipe/prompt.h"
#include "stream_helpers.h"

namespace dsinfer::recipe {
namespace {

using testing::join;
using testing::options;
using testing::run_chunks;
using V = std::vector<std::string>;


// V4 (`tool_calls`, `invoke`, `parameter`) or V4.1 (` calls`, ` invoke`, ` parameter`) markup.
std::string tag(bool v41, const char* name) {
  const std::string n = name;
  if (!v41) return n;
  return n == "tool_calls" ? " calls" : " " + n;
}
std::string open(bool v41, const char* name, const std::string& attrs = "") {
  return "<" + std::string(tokens::kDsml) + tag(v41, name) + attrs + ">";
}
std::string close(bool v41, const char* name) { return "</" + std::string(tokens::kDsml) + tag(v41, name) + ">"; }
std::string param(bool v41, const std::string& name, bool is_string, const std::string& value) {
  return open(v41, "parameter", " name=\"" + name + "\" string=\"" + (is_string ? "true" : "false") + "\"") + value +
         close(v41, "parameter");
}
std::string invoke(bool v41, const std::string& name, const std::vector<std::string>& params) {
  std::string s = open(v41, "invoke", " name=\"" + name + "\"") + "\n";
  for (const auto& p : params) s += p + "\n";
  return s + close(v41, "invoke");
}
std::string block(bool v41, const std::vector<std::string>& invokes) {
  std::string s = open(v41, "tool_calls") + "\n";
  for (const auto& i : invokes) s += i + "\n";
  return s + close(v41, "tool_calls");
}

struct Vector {
  const char* name;
  ParsingOptions opts;
  std::string text;
  V expected;
  stream::InferenceFinish finish = stream::InferenceFinish::kStop;
  bool split_invariant = true;  // JSON mode emits one space per piece, so its text depends on chunking
};

std::vector<Vector> vectors() {
  const auto start = ReasoningStage::kStart;
  std::vector<Vector> v;
  v.push_back({"P1", options(false, start), "\n\nLet me think.\n\n</think>\n\nAnswer.",
               {"R:Let me think.", "T:Answer.", "Finish:stop"}});
  v.push_back({"P3", options(false, std::nullopt), "</think>Hi", {"T:Hi", "Finish:stop"}});
  v.push_back({"P4", options(false, std::nullopt, false, {"END"}), "Hello world END tail",
               {"T:Hello world ", "Finish:stop_sequence:END"}});
  v.push_back({"P5", options(true, std::nullopt),
               "Checking.\n\n" + block(false, {invoke(false, "note", {param(false, "text", true, "He said \"hi\"\nbye"),
                                                                    param(false, "tags", false, "[\"a\", 1]")})}),
               {"T:Checking.", "Begin", "Call:note", "Args:{\"", "Args:text", "Args:\": ", "Args:\"",
                "Args:He said \\\"hi\\\"\\nbye", "Args:\"", "Args:, \"", "Args:tags", "Args:\": ", "Args:[\"a\", 1]",
                "Args:}", "Finish:tool_calls"}});
  v.push_back({"P6", options(true, ReasoningStage::kReasoning),
               "Need a tool.\n\n" + block(true, {invoke(true, "f", {})}),
               {"R:Need a tool.", "Begin", "Call:f", "Args:{}", "Finish:tool_calls"}});
  v.push_back({"P7", options(true, std::nullopt),
               block(true, {invoke(true, "a", {param(true, "x", false, "1")}), invoke(true, "b", {param(true, "y", true, "z")})}),
               {"Begin", "Call:a", "Args:{\"", "Args:x", "Args:\": ", "Args:1", "Args:}", "Begin", "Call:b", "Args:{\"",
                "Args:y", "Args:\": ", "Args:\"", "Args:z", "Args:\"", "Args:}", "Finish:tool_calls"}});
  {
    std::string text = block(true, {invoke(true, "f", {param(true, "x", false, "1")})});
    text = text.substr(open(true, "tool_calls").size() + 1);  // the prompt already opened the block
    v.push_back({"P8", options(true, std::nullopt, false, {}, true), text,
                 {"Begin", "Call:f", "Args:{\"", "Args:x", "Args:\": ", "Args:1", "Args:}", "Finish:tool_calls"}});
  }
  v.push_back({"P9", options(false, std::nullopt, true), "Here:\n```json\n{\"a\": 1}\n```\nDone",
               {"T: ", "T:{\"a\": 1}", "T: ", "Finish:stop"}, stream::InferenceFinish::kStop, false});
  v.push_back({"P10", options(false, std::nullopt, true), "{\"a\": [1, 2]}",
               {"T:{", "T:\"a\": [1, 2]}", "Finish:stop"}, stream::InferenceFinish::kStop, false});
  v.push_back({"P11", options(true, std::nullopt), block(true, {invoke(true, "f", {})}) + "\nextra",
               {"Begin", "Call:f", "Args:{}", "Finish:tool_calls"}});
  v.push_back({"P12", options(true, std::nullopt),
               open(true, "tool_calls") + "\n" + open(true, "invoke", " name=\"f\"") + "\n" +
                   open(true, "parameter", " name=\"x\" string=\"true\"") + "ab",
               {"Begin", "Call:f", "Args:{\"", "Args:x", "Args:\": ", "Args:\"", "Args:ab", "Finish:length"},
               stream::InferenceFinish::kLength});
  v.push_back({"P13", options(false, std::nullopt), open(true, "tool_calls") + "x",
               {"T:" + open(true, "tool_calls") + "x", "Finish:stop"}});
  v.push_back({"stop not in reasoning", options(false, start, false, {"STOP"}), "a STOP b</think>c STOP d",
               {"R:a STOP b", "T:c ", "Finish:stop_sequence:STOP"}});
  v.push_back({"overlapping stop", options(false, std::nullopt, false, {"abab"}), "aababab", {"T:a", "Finish:stop_sequence:abab"}});
  v.push_back({"empty stop ignored", options(false, std::nullopt, false, {""}), "text", {"T:text", "Finish:stop"}});
  v.push_back({"DSML in reasoning", options(true, start),
               "\nthinking\n" + block(false, {invoke(false, "g", {param(false, "k", true, "v")})}),
               {"R:thinking", "Begin", "Call:g", "Args:{\"", "Args:k", "Args:\": ", "Args:\"", "Args:v", "Args:\"", "Args:}",
                "Finish:tool_calls"}});
  return v;
}

TEST(StreamParser, SpecVectorsInOneChunk) {
  for (const auto& v : vectors()) {
    EXPECT_EQ(run_chunks(v.opts, {v.text}, v.finish).outputs, v.expected) << v.name;
  }
}

TEST(StreamParser, SpecVectorP2SplitMarker) {
  // §5.7 P2: the end-of-thinking marker split across chunks is held back and never emitted.
  const auto run = run_chunks(options(false, ReasoningStage::kStart), {"Let me th", "ink.</thi", "nk>Ans", "wer."});
  EXPECT_EQ(run.outputs, (V{"R:Let me th", "R:ink.", "T:Ans", "T:wer.", "Finish:stop"}));
}

TEST(StreamParser, EverySplitGivesTheSameResult) {
  for (const auto& v : vectors()) {
    if (!v.split_invariant) continue;
    const auto whole = join(run_chunks(v.opts, {v.text}, v.finish).outputs);
    const size_t n = v.text.size();
    for (size_t a = 0; a <= n; ++a) {
      const auto two = join(run_chunks(v.opts, {v.text.substr(0, a), v.text.substr(a)}, v.finish).outputs);
      ASSERT_EQ(two, whole) << v.name << " split at " << a;
    }
    for (size_t a = 1; a < n; a += 3)
      for (size_t b = a; b <= n; b += 5) {
        const auto three =
            join(run_chunks(v.opts, {v.text.substr(0, a), v.text.substr(a, b - a), v.text.substr(b)}, v.finish).outputs);
        ASSERT_EQ(three, whole) << v.name << " split at " << a << "," << b;
      }
    V bytes;
    for (char c : v.text) bytes.push_back(std::string(1, c));
    ASSERT_EQ(join(run_chunks(v.opts, bytes, v.finish).outputs), whole) << v.name << " one byte per chunk";
  }
}

TEST(StreamParser, StopSequenceAcrossChunks) {
  // §5.6: "Ans","wer ST","OP ignored" with stop STOP emits Ans, wer and then stops.
  const auto run = run_chunks(options(false, std::nullopt, false, {"STOP"}), {"Ans", "wer ST", "OP ignored", "more"});
  EXPECT_EQ(run.outputs, (V{"T:Ans", "T:wer ", "Finish:stop_sequence:STOP"}));
  EXPECT_EQ(run.completion_tokens, 3);  // the chunk after the stop is not read
  const std::string text = "Answer STOP ignored tail";
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      const auto r = run_chunks(options(false, std::nullopt, false, {"STOP"}),
                                {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      const auto j = join(r.outputs);
      ASSERT_EQ(j.text, "Answer ") << a << "," << b;
      ASSERT_EQ(j.finish, "Finish:stop_sequence:STOP") << a << "," << b;
      for (const auto& o : r.outputs) ASSERT_EQ(o.find("STOP"), o.rfind("Finish", 0) == 0 ? o.find("STOP") : std::string::npos);
    }
  }
}

// Upstream's quoted_tool_parameter_names_survive_chunk_boundaries, re-stated: names with spaces and with
// `string=` inside, string values with newlines and CJK, object and number values, both tag versions.
TEST(StreamParser, QuotedParameterNamesSurviveChunkBoundaries) {
  for (bool v41 : {false, true}) {
    const std::string text =
        block(v41, {invoke(v41, "ship", {param(v41, "shipping address", true, "1 Main St\nApt \"2\""),
                                         param(v41, " string= mode ", true, "\xE4\xB8\xAD\xE6\x96\x87"),
                                         param(v41, "options", false, "{\"fast\": true, \"tags\": [1, 2]}"),
                                         param(v41, "count", false, "42")})});
    const Json expected = parse_json(
        "{\"shipping address\": \"1 Main St\\nApt \\\"2\\\"\", \" string= mode \": \"\xE4\xB8\xAD\xE6\x96\x87\", "
        "\"options\": {\"fast\": true, \"tags\": [1, 2]}, \"count\": 42}");
    auto check = [&](const V& chunks, const std::string& where) {
      const auto j = join(run_chunks(options(true, std::nullopt), chunks).outputs);
      ASSERT_EQ(j.calls, "ship;") << where;
      ASSERT_EQ(j.finish, "Finish:tool_calls") << where;
      Json parsed;
      ASSERT_NO_THROW(parsed = parse_json(j.arguments)) << where << ": " << j.arguments;
      ASSERT_EQ(parsed, expected) << where;
      ASSERT_EQ(to_compact_json(parsed), to_compact_json(expected)) << where << " (key order)";
    };
    // Text chunks carry whole characters (the token decoder guarantees it), so cut only between them.
    auto boundary = [&](size_t i) { return i == text.size() || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80; };
    check({text}, "whole");
    for (size_t a = 0; a <= text.size(); ++a)
      if (boundary(a)) check({text.substr(0, a), text.substr(a)}, "split at " + std::to_string(a));
    V chars;
    for (size_t i = 0; i < text.size();) {
      size_t j = i + 1;
      while (!boundary(j)) ++j;
      chars.push_back(text.substr(i, j - i));
      i = j;
    }
    check(chars, "one character per chunk");
  }
}

TEST(StreamParser, LegacyLabelSchemeGivesTheSameArguments) {
  // The goldens' older framing: `{`, `"x"`, `: ` instead of `{"`, `x`, `": `; same final string.
  const std::string text = block(true, {invoke(true, "f", {param(true, "x", true, "a"), param(true, "y", false, "2")})});
  const auto legacy = run_chunks(options(true, std::nullopt), {text}, stream::InferenceFinish::kStop, stream::LabelScheme::kLegacy);
  EXPECT_EQ(legacy.outputs, (V{"Begin", "Call:f", "Args:{", "Args:\"x\"", "Args:: ", "Args:\"", "Args:a", "Args:\"",
                               "Args:, ", "Args:\"y\"", "Args:: ", "Args:2", "Args:}", "Finish:tool_calls"}));
  EXPECT_EQ(join(legacy.outputs).arguments, join(run_chunks(options(true, std::nullopt), {text}).outputs).arguments);
}

TEST(StreamParser, EndOfStreamWithoutFinish) {
  std::vector<std::string> out;
  stream::StreamProcessor p(std::make_unique<testing::RecordingGenerator>(&out), options(false, std::nullopt));
  p.push(stream::InferenceChunk::text_chunk("Hi </thi", 2));
  p.finish();
  EXPECT_EQ(out, (V{"T:Hi </thi", "Finish:end_of_stream"}));  // the held-back partial marker is flushed
  EXPECT_TRUE(p.finished());
  p.push(stream::InferenceChunk::text_chunk("late", 1));
  EXPECT_EQ(out.size(), 2u);
}

}  // namespace
}  // namespace dsinfer::recipe
