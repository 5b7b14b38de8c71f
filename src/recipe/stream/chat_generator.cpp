// Chat Completions chunks: one choice (index 0); the final chunk carries finish_reason and usage together.
#include "recipe/stream/chunk_generator.h"

namespace dsinfer::recipe::stream {
namespace {

Json chat_usage(const PromptUsage& prompt, const CompletionUsage& completion) {
  Json u = Json::object();
  u["prompt_tokens"] = prompt.prompt_tokens;
  u["completion_tokens"] = completion.completion_tokens;
  u["total_tokens"] = prompt.prompt_tokens + completion.completion_tokens;
  Json details = Json::object();
  details["cached_tokens"] = prompt.prompt_cache_hit_tokens;
  u["prompt_tokens_details"] = std::move(details);
  u["prompt_cache_hit_tokens"] = prompt.prompt_cache_hit_tokens;
  u["prompt_cache_miss_tokens"] = std::max<int64_t>(prompt.prompt_tokens - prompt.prompt_cache_hit_tokens, 0);
  return u;
}

const char* chat_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kToolCalls: return "tool_calls";
    case FinishReason::kContentFilter: return "content_filter";
    case FinishReason::kLength: return "length";
    default: return "stop";  // stop, stop sequence, end of stream
  }
}

class ChatGenerator : public ChunkGenerator {
 public:
  explicit ChatGenerator(const GeneratorOptions& o)
      : id_(o.id), model_(o.model), created_(o.created.value_or(unix_now())), thinking_(o.thinking_mode),
        include_usage_(o.include_usage), separate_usage_chunk_(o.separate_usage_chunk) {}

  std::vector<StreamEvent> generate(const OutputChunk& chunk) override {
    Json delta = Json::object();
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart:
        prompt_usage_ = chunk.prompt_usage;
        fingerprint_ = chunk.system_fingerprint;
        delta["role"] = "assistant";
        if (thinking_) {
          delta["content"] = nullptr;
          delta["reasoning_content"] = "";
        } else {
          delta["content"] = "";
        }
        return emit(std::move(delta), nullptr, nullptr);
      case OutputChunk::Kind::kRaw:
        delta["content"] = chunk.text;
        if (thinking_) delta["reasoning_content"] = nullptr;
        return emit(std::move(delta), nullptr, nullptr);
      case OutputChunk::Kind::kReasoning:
        delta["content"] = nullptr;
        delta["reasoning_content"] = chunk.text;
        return emit(std::move(delta), nullptr, nullptr);
      case OutputChunk::Kind::kToolCallBegin:
        return {};
      case OutputChunk::Kind::kToolCall: {
        const int64_t index = tool_calls_++;
        Json function = Json::object();
        function["name"] = chunk.text;
        function["arguments"] = "";
        Json call = Json::object();
        call["index"] = index;
        call["id"] = core::str_cat("call_", id_, "_", index);
        call["type"] = "function";
        call["function"] = std::move(function);
        delta["tool_calls"] = Json::array({std::move(call)});
        return emit(std::move(delta), nullptr, nullptr);
      }
      case OutputChunk::Kind::kToolArgumentsDelta: {
        Json function = Json::object();
        function["arguments"] = chunk.text;
        Json call = Json::object();
        call["index"] = tool_calls_ > 0 ? tool_calls_ - 1 : 0;
        call["function"] = std::move(function);
        delta["tool_calls"] = Json::array({std::move(call)});
        return emit(std::move(delta), nullptr, nullptr);
      }
      case OutputChunk::Kind::kFinish: {
        delta["content"] = "";
        if (thinking_) delta["reasoning_content"] = nullptr;
        const Json usage = chat_usage(prompt_usage_, chunk.completion_usage);
        if (!separate_usage_chunk_) return emit(std::move(delta), chat_finish_reason(chunk.finish_reason), &usage);
        auto out = emit(std::move(delta), chat_finish_reason(chunk.finish_reason), nullptr);
        usage_ = usage;  // the non-streamed body carries it either way
        if (include_usage_) {
          Json last = chunk_head();
          last["choices"] = Json::array();
          last["usage"] = usage;
          out.push_back({"", std::move(last)});
        }
        return out;
      }
    }
    return {};
  }

  Json response() const override {
    Json message = Json::object();
    message["role"] = "assistant";
    message["content"] = content_ ? Json(*content_) : Json(nullptr);
    if (reasoning_) message["reasoning_content"] = *reasoning_;
    if (!calls_.empty()) {
      Json calls = Json::array();
      for (const auto& c : calls_) {
        Json function = Json::object();
        function["name"] = c.name;
        function["arguments"] = c.arguments;
        Json call = Json::object();
        call["id"] = c.id;
        call["type"] = "function";
        call["function"] = std::move(function);
        calls.push_back(std::move(call));
      }
      message["tool_calls"] = std::move(calls);
    }
    Json choice = Json::object();
    choice["index"] = 0;
    choice["message"] = std::move(message);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason_ ? Json(*finish_reason_) : Json(nullptr);
    Json r = Json::object();
    r["id"] = id_;
    r["object"] = "chat.completion";
    r["created"] = created_;
    r["model"] = model_;
    r["system_fingerprint"] = fingerprint_ ? Json(*fingerprint_) : Json(nullptr);
    r["choices"] = started_ ? Json::array({std::move(choice)}) : Json::array();
    if (usage_) r["usage"] = *usage_;
    return r;
  }

  std::string done_frame() const override { return sse_done_frame(); }

 private:
  std::vector<StreamEvent> emit(Json delta, const char* finish_reason, const Json* usage) {
    accumulate(delta, finish_reason, usage);
    Json choice = Json::object();
    choice["index"] = 0;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason ? Json(finish_reason) : Json(nullptr);
    Json chunk = chunk_head();
    chunk["choices"] = Json::array({std::move(choice)});
    if (usage) chunk["usage"] = *usage;
    else if (include_usage_) chunk["usage"] = nullptr;
    std::vector<StreamEvent> out;
    out.push_back({"", std::move(chunk)});
    return out;
  }

  Json chunk_head() const {
    Json chunk = Json::object();
    chunk["id"] = id_;
    chunk["object"] = "chat.completion.chunk";
    chunk["created"] = created_;
    chunk["model"] = model_;
    chunk["system_fingerprint"] = fingerprint_ ? Json(*fingerprint_) : Json(nullptr);
    return chunk;
  }

  void accumulate(const Json& delta, const char* finish_reason, const Json* usage) {
    started_ = true;
    if (auto it = delta.find("content"); it != delta.end() && it->is_string())
      content_ = content_.value_or("") + it->get<std::string>();
    if (auto it = delta.find("reasoning_content"); it != delta.end() && it->is_string())
      reasoning_ = reasoning_.value_or("") + it->get<std::string>();
    if (auto it = delta.find("tool_calls"); it != delta.end()) {
      for (const auto& call : *it) {
        const Json& function = call["function"];
        if (call.contains("id")) {
          calls_.push_back({call["id"].get<std::string>(), function["name"].get<std::string>(),
                            function["arguments"].get<std::string>()});
        } else if (const size_t index = call["index"].get<size_t>(); index < calls_.size()) {
          calls_[index].arguments += function["arguments"].get_ref<const std::string&>();
        }
      }
    }
    if (finish_reason) finish_reason_ = finish_reason;
    if (usage) usage_ = *usage;
  }

  std::string id_, model_;
  int64_t created_;
  bool thinking_, include_usage_, separate_usage_chunk_;
  PromptUsage prompt_usage_;
  std::optional<std::string> fingerprint_;
  int64_t tool_calls_ = 0;
  // accumulated non-streaming body
  bool started_ = false;
  std::optional<std::string> content_, reasoning_, finish_reason_;
  struct Call {
    std::string id, name, arguments;
  };
  std::vector<Call> calls_;
  std::optional<Json> usage_;
};

}  // namespace

std::unique_ptr<ChunkGenerator> make_chat_generator(const GeneratorOptions& options) {
  return std::make_unique<ChatGenerator>(options);
}

}  // namespace dsinfer::recipe::stream
