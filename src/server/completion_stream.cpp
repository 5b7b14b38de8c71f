// The legacy Completions API (POST /v1/completions): raw prompts or token ids in, raw text out, with
// stop strings matched across token boundaries and never sent. No chat template, no output parsing.
#include <algorithm>

#include "recipe/json_text.h"
#include "recipe/stream/chunk_generator.h"
#include "server/logprobs_json.h"
#include "server/protocol_streams.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace dsinfer::server {
namespace {

using Json = recipe::Json;

// Holds back text that might be the start of a stop string; reports a complete one.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) {
    for (auto& s : stops)
      if (!s.empty()) stops_.push_back(std::move(s));
  }
  // Adds text; returns what may be sent now. Sets matched once a stop string is complete (the text
  // from it on is dropped).
  std::string feed(const std::string& text) {
    held_ += text;
    size_t cut = std::string::npos;
    for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
      matched_ = true;
      std::string out = held_.substr(0, cut);
      held_.clear();
      return out;
    }
    size_t keep = 0;  // the longest suffix of held_ that is a proper prefix of a stop string
    for (const auto& s : stops_)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }
  std::string flush() {
    std::string out;
    out.swap(held_);
    return out;
  }
  bool matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
};

class CompletionStream : public ResponseStream {
 public:
  CompletionStream(const CompletionOptions& options, const tokenizer::Tokenizer& tokenizer)
      : options_(options), tokenizer_(tokenizer), decoder_(tokenizer, options.skip_special_tokens), stop_(options.stop), created_(recipe::stream::unix_now()) {
    if (options_.echo) text_ = options_.prompt_text;
    token_offset_ = static_cast<int64_t>(text_.size());
  }

  void logprobs(std::span<const engine::TokenLogprobs> per_token) override {
    pending_logprobs_.assign(per_token.begin(), per_token.end());
  }

  std::string begin(int64_t prompt_tokens, int64_t cached_tokens) override {
    prompt_tokens_ = prompt_tokens;
    cached_tokens_ = cached_tokens;
    if (options_.echo && options_.stream && !options_.prompt_text.empty()) return chunk(options_.prompt_text, nullptr);
    return {};
  }

  std::string tokens(std::span<const int32_t> ids) override {
    if (finished_) return {};
    completion_tokens_ += static_cast<int64_t>(ids.size());
    if (options_.logprobs >= 0 && pending_logprobs_.size() == ids.size()) {
      // text_offset counts each token's bytes from where the completion's text starts (after an echo).
      for (size_t i = 0; i < ids.size(); ++i) {
        append_completion_logprob(all_logprobs_, tokenizer_, ids[i], pending_logprobs_[i], token_offset_);
        append_completion_logprob(unsent_logprobs_, tokenizer_, ids[i], pending_logprobs_[i], token_offset_);
        if (!(options_.skip_special_tokens && tokenizer_.is_special(ids[i])))
          token_offset_ += static_cast<int64_t>(tokenizer_.token_bytes(ids[i]).size());
      }
    }
    pending_logprobs_.clear();
    std::string out = stop_.feed(decoder_.step(ids));
    std::string bytes;
    if (!out.empty()) {
      text_ += out;
      if (options_.stream) bytes = chunk(out, nullptr);
    }
    if (stop_.matched()) {
      finished_ = true;
      finish_reason_ = "stop";
      bytes += final_frames();
    }
    return bytes;
  }

  bool finished() const override { return finished_; }

  std::string end(StreamEnd reason, const std::string& error_message) override {
    if (finished_) return {};
    finished_ = true;
    std::string bytes;
    std::string rest = stop_.feed(decoder_.flush());
    if (!stop_.matched()) rest += stop_.flush();
    if (!rest.empty()) {
      text_ += rest;
      if (options_.stream) bytes += chunk(rest, nullptr);
    }
    if (reason == StreamEnd::kError || reason == StreamEnd::kCancelled) {
      finish_reason_ = reason == StreamEnd::kError ? "error" : "cancelled";
      if (options_.stream) {
        Json err = {{"error",
                     {{"message", error_message},
                      {"type", reason == StreamEnd::kError ? "internal_error" : "service_unavailable"},
                      {"param", nullptr},
                      {"code", reason == StreamEnd::kError ? "internal_error" : "cancelled"}}}};
        bytes += "data: " + recipe::to_compact_json(err) + "\n\ndata: [DONE]\n\n";
      }
      return bytes;
    }
    finish_reason_ = reason == StreamEnd::kLength ? "length" : "stop";
    return bytes + final_frames();
  }

  std::string body() const override {
    Json j = base();
    j["choices"] = Json::array({Json{{"text", text_},
                                     {"index", 0},
                                     {"logprobs", options_.logprobs >= 0 ? all_logprobs_ : Json(nullptr)},
                                     {"finish_reason", finish_reason_}}});
    j["usage"] = usage();
    return recipe::to_compact_json(j);
  }

  int64_t completion_tokens() const override { return completion_tokens_; }
  std::string finish_reason() const override { return finish_reason_; }

 private:
  Json base() const {
    return Json{{"id", options_.id}, {"object", "text_completion"}, {"created", created_}, {"model", options_.model}};
  }
  Json usage() const {
    return Json{{"prompt_tokens", prompt_tokens_},
                {"completion_tokens", completion_tokens_},
                {"total_tokens", prompt_tokens_ + completion_tokens_},
                {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}},
                {"prompt_cache_hit_tokens", cached_tokens_},
                {"prompt_cache_miss_tokens", std::max<int64_t>(prompt_tokens_ - cached_tokens_, 0)}};
  }
  // Streaming: a chunk carries the logprobs of the tokens received since the previous chunk.
  std::string chunk(const std::string& text, const char* finish) {
    if (!options_.stream) return {};
    Json j = base();
    Json lp = nullptr;
    if (options_.logprobs >= 0) {
      lp = std::move(unsent_logprobs_);
      unsent_logprobs_ = empty_completion_logprobs();
    }
    j["choices"] = Json::array({Json{{"text", text}, {"index", 0}, {"logprobs", std::move(lp)},
                                     {"finish_reason", finish ? Json(finish) : Json(nullptr)}}});
    if (options_.include_usage) j["usage"] = nullptr;
    return "data: " + recipe::to_compact_json(j) + "\n\n";
  }
  std::string final_frames() {
    if (!options_.stream) return {};
    std::string out = chunk("", finish_reason_.c_str());
    if (options_.include_usage) {
      Json j = base();
      j["choices"] = Json::array();
      j["usage"] = usage();
      out += "data: " + recipe::to_compact_json(j) + "\n\n";
    }
    return out + "data: [DONE]\n\n";
  }

  CompletionOptions options_;
  const tokenizer::Tokenizer& tokenizer_;
  tokenizer::IncrementalDecoder decoder_;
  std::vector<engine::TokenLogprobs> pending_logprobs_;
  Json all_logprobs_ = empty_completion_logprobs();     // the body's
  Json unsent_logprobs_ = empty_completion_logprobs();  // the next chunk's
  int64_t token_offset_ = 0;
  StopMatcher stop_;
  int64_t created_;
  std::string text_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  bool finished_ = false;
  std::string finish_reason_ = "stop";
};

}  // namespace

std::unique_ptr<ResponseStream> make_completion_stream(const CompletionOptions& options,
                                                       const tokenizer::Tokenizer& tokenizer) {
  return std::make_unique<CompletionStream>(options, tokenizer);
}

}  // namespace dsinfer::server
