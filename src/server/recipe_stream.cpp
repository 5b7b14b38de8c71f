// Chat Completions, Responses and Messages responses: the engine's token ids go through the recipe's
// StreamProcessor (output parsing: reasoning, tool calls, stop sequences) and its protocol chunk
// generator; the server only frames the events as SSE and adds the error events the recipe leaves out.
#include "recipe/stream/stream_processor.h"
#include "server/logprobs_json.h"
#include "server/protocol_streams.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {
namespace {

using recipe::Json;
namespace rs = recipe::stream;

rs::GeneratorOptions generator_options(const recipe::ConvertedRequest& request, const std::string& id,
                                       const std::string& model, bool separate_usage_chunk) {
  rs::GeneratorOptions o = rs::generator_options_for(request, id, model);
  o.separate_usage_chunk = separate_usage_chunk;
  return o;
}

class RecipeStream : public ResponseStream {
 public:
  RecipeStream(const recipe::ConvertedRequest& request, const std::string& id, const std::string& model, bool stream,
               bool separate_usage_chunk, const tokenizer::Tokenizer& tokenizer, bool skip_special_tokens)
      : protocol_(request.protocol),
        stream_(stream),
        tokenizer_(tokenizer),
        processor_(rs::make_chunk_generator(request.protocol,
                                            generator_options(request, id, model, separate_usage_chunk)),
                   request.request.parsing_options) {
    processor_.set_token_decoder([&tokenizer, skip_special_tokens](std::span<const int32_t> ids) {
      return tokenizer.decode(ids, skip_special_tokens);
    });
  }

  std::string begin(int64_t prompt_tokens, int64_t cached_tokens) override {
    return frames(processor_.push(rs::InferenceChunk::ready(prompt_tokens, cached_tokens)));
  }

  void logprobs(std::span<const engine::TokenLogprobs> per_token) override {
    pending_logprobs_.assign(per_token.begin(), per_token.end());
  }

  std::string tokens(std::span<const int32_t> ids) override {
    if (protocol_ == recipe::Protocol::kChatCompletions && pending_logprobs_.size() == ids.size()) {
      for (size_t i = 0; i < ids.size(); ++i) {
        Json entry = chat_logprob_entry(tokenizer_, ids[i], pending_logprobs_[i]);
        all_logprobs_.push_back(entry);
        unsent_logprobs_.push_back(std::move(entry));
      }
    }
    pending_logprobs_.clear();
    std::vector<rs::StreamEvent> events = processor_.push_tokens(ids);
    attach_logprobs(events);
    std::string out = frames(events);
    if (processor_.finished() && stream_) out += processor_.done_frame();
    return out;
  }

  bool finished() const override { return processor_.finished(); }

  std::string end(StreamEnd reason, const std::string& error_message) override {
    if (processor_.finished()) return {};
    if (reason == StreamEnd::kStop || reason == StreamEnd::kLength) {
      std::vector<rs::StreamEvent> events = processor_.push(rs::InferenceChunk::finished(
          reason == StreamEnd::kLength ? rs::InferenceFinish::kLength : rs::InferenceFinish::kStop));
      attach_logprobs(events);
      std::string out = frames(events);
      if (stream_) out += processor_.done_frame();
      return out;
    }
    failed_ = reason == StreamEnd::kError ? "error" : "cancelled";
    return stream_ ? error_frames(reason, error_message) : std::string();
  }

  std::string body() const override {
    Json r = processor_.response();
    if (!all_logprobs_.empty()) {
      if (auto c = r.find("choices"); c != r.end() && c->is_array() && !c->empty())
        (*c)[0]["logprobs"] = Json{{"content", all_logprobs_}, {"refusal", nullptr}};
    }
    return recipe::to_compact_json(r);
  }

  int64_t completion_tokens() const override { return processor_.completion_usage().completion_tokens; }

  std::string finish_reason() const override {
    if (!failed_.empty()) return failed_;
    const Json r = processor_.response();
    try {
      switch (protocol_) {
        case recipe::Protocol::kChatCompletions: return r.at("choices").at(0).at("finish_reason").get<std::string>();
        case recipe::Protocol::kMessages: return r.at("stop_reason").get<std::string>();
        case recipe::Protocol::kResponses: {
          if (r.value("status", "") == "incomplete") return r.at("incomplete_details").at("reason").get<std::string>();
          for (const auto& item : r.at("output"))
            if (item.value("type", "") == "function_call" || item.value("type", "") == "custom_tool_call")
              return "tool_calls";
          return "stop";
        }
      }
    } catch (const std::exception&) {
    }
    return "unknown";
  }

 private:
  std::string frames(const std::vector<rs::StreamEvent>& events) {
    sequence_ += static_cast<int64_t>(events.size());
    if (!stream_) return {};
    std::string out;
    for (const auto& e : events) out += rs::sse_frame(e);
    return out;
  }

  // Streaming Chat: the logprobs of the tokens received since the last chunk that carried some ride on
  // the next chunk with a choice (text the parser holds back, e.g. a possible stop sequence, delays them).
  void attach_logprobs(std::vector<rs::StreamEvent>& events) {
    if (unsent_logprobs_.empty() || !stream_) return;
    for (auto& e : events) {
      auto c = e.data.find("choices");
      if (c == e.data.end() || !c->is_array() || c->empty()) continue;
      (*c)[0]["logprobs"] = Json{{"content", std::move(unsent_logprobs_)}, {"refusal", nullptr}};
      unsent_logprobs_ = Json::array();
      return;
    }
  }

  // A stream that cannot end normally ends with the protocol's error event.
  std::string error_frames(StreamEnd reason, const std::string& message) const {
    const bool error = reason == StreamEnd::kError;
    switch (protocol_) {
      case recipe::Protocol::kChatCompletions: {
        Json e = {{"error",
                   {{"message", message},
                    {"type", error ? "internal_error" : "service_unavailable"},
                    {"param", nullptr},
                    {"code", error ? "internal_error" : "cancelled"}}}};
        return rs::sse_frame({"", e}) + rs::sse_done_frame();
      }
      case recipe::Protocol::kResponses: {
        Json e = {{"type", "error"},
                  {"code", error ? "server_error" : "cancelled"},
                  {"message", message},
                  {"param", nullptr},
                  {"sequence_number", sequence_}};
        return rs::sse_frame({"error", e});
      }
      case recipe::Protocol::kMessages: {
        Json e = {{"type", "error"},
                  {"error", {{"type", error ? "api_error" : "overloaded_error"}, {"message", message}}}};
        return rs::sse_frame({"error", e});
      }
    }
    return {};
  }

  recipe::Protocol protocol_;
  bool stream_;
  const tokenizer::Tokenizer& tokenizer_;
  std::vector<engine::TokenLogprobs> pending_logprobs_;
  Json all_logprobs_ = Json::array();     // every token's, for the body
  Json unsent_logprobs_ = Json::array();  // not yet on a chunk
  rs::StreamProcessor processor_;
  int64_t sequence_ = 0;  // events produced so far (Responses numbers them from 0)
  std::string failed_;
};

}  // namespace

std::unique_ptr<ResponseStream> make_recipe_stream(const recipe::ConvertedRequest& request, const std::string& id,
                                                   const std::string& model, bool stream, bool separate_usage_chunk,
                                                   const tokenizer::Tokenizer& tokenizer, bool skip_special_tokens) {
  return std::make_unique<RecipeStream>(request, id, model, stream, separate_usage_chunk, tokenizer,
                                        skip_special_tokens);
}

}  // namespace dsinfer::server
