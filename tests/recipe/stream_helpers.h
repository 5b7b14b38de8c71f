// Test helpers: run text chunks through a StreamProcessor and record the OutputChunks it produces as short
// strings ("R:..." reasoning, "T:..." text, "Begin", "Call:name", "Args:...", "Finish:reason[:stop]").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "recipe/stream/stream_processor.h"

namespace dsinfer::recipe::testing {

class RecordingGenerator : public stream::ChunkGenerator {
 public:
  explicit RecordingGenerator(std::vector<std::string>* out) : out_(out) {}
  std::vector<stream::StreamEvent> generate(const stream::OutputChunk& c) override {
    using K = stream::OutputChunk::Kind;
    switch (c.kind) {
      case K::kStart: break;
      case K::kRaw: out_->push_back("T:" + c.text); break;
      case K::kReasoning: out_->push_back("R:" + c.text); break;
      case K::kToolCallBegin: out_->push_back("Begin"); break;
      case K::kToolCall: out_->push_back("Call:" + c.text); break;
      case K::kToolArgumentsDelta: out_->push_back("Args:" + c.text); break;
      case K::kFinish:
        out_->push_back(std::string("Finish:") + stream::to_string(c.finish_reason) +
                        (c.stop_sequence ? ":" + *c.stop_sequence : std::string()));
        break;
    }
    return {};
  }
  Json response() const override { return Json(); }

 private:
  std::vector<std::string>* out_;
};

struct StreamRun {
  std::vector<std::string> outputs;
  int64_t completion_tokens = 0;
};

inline StreamRun run_chunks(const ParsingOptions& options, const std::vector<std::string>& chunks,
                            stream::InferenceFinish finish = stream::InferenceFinish::kStop,
                            stream::LabelScheme scheme = stream::LabelScheme::kQuotedNames) {
  StreamRun run;
  stream::ProcessorOptions po;
  po.label_scheme = scheme;
  stream::StreamProcessor p(std::make_unique<RecordingGenerator>(&run.outputs), options, po);
  for (const auto& c : chunks) p.push(stream::InferenceChunk::text_chunk(c, 1));
  p.push(stream::InferenceChunk::finished(finish));
  run.completion_tokens = p.completion_usage().completion_tokens;
  return run;
}

// Concatenations by kind, which must not depend on how the text was split.
struct Joined {
  std::string reasoning, text, arguments, calls, finish;
  bool operator==(const Joined&) const = default;
};

inline Joined join(const std::vector<std::string>& outputs) {
  Joined j;
  for (const auto& o : outputs) {
    if (o.rfind("R:", 0) == 0) j.reasoning += o.substr(2);
    else if (o.rfind("T:", 0) == 0) j.text += o.substr(2);
    else if (o.rfind("Args:", 0) == 0) j.arguments += o.substr(5);
    else if (o.rfind("Call:", 0) == 0) j.calls += o.substr(5) + ";";
    else if (o.rfind("Finish:", 0) == 0) j.finish = o;
  }
  return j;
}

inline ParsingOptions options(bool tools, std::optional<ReasoningStage> stage, bool json = false,
                              std::vector<std::string> stops = {}, bool initial_tool_calls = false) {
  ParsingOptions o;
  o.parse_tool_calls = tools;
  o.reasoning_initial_stage = stage;
  o.parse_json_output = json;
  o.stop_sequences = std::move(stops);
  o.tool_call_initial_stage = initial_tool_calls;
  return o;
}

}  // namespace dsinfer::recipe::testing
