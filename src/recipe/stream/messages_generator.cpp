// Anthropic Messages events: message_start, content blocks opened and closed as the output kind changes
// (thinking, text, tool_use; a ping after the first block start), message_delta with the stop reason and
// usage, message_stop.
#include "recipe/stream/chunk_generator.h"

namespace dsinfer::recipe::stream {
namespace {

const char* stop_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "max_tokens";
    case FinishReason::kStopSequence: return "stop_sequence";
    case FinishReason::kToolCalls: return "tool_use";
    case FinishReason::kContentFilter: return "refusal";
    default: return "end_turn";
  }
}

struct Block {
  enum class Type { kText, kThinking, kToolUse };
  explicit Block(Type t) : type(t) {}
  Type type;
  std::string text;          // text / thinking
  std::string signature;     // thinking
  std::string id, name;      // tool_use
  std::string partial_json;  // tool_use input fragments
  Json input = Json::object();

  Json to_json() const {
    Json j = Json::object();
    switch (type) {
      case Type::kText:
        j["type"] = "text";
        j["text"] = text;
        break;
      case Type::kThinking:
        j["type"] = "thinking";
        j["thinking"] = text;
        j["signature"] = signature;
        break;
      case Type::kToolUse:
        j["type"] = "tool_use";
        j["id"] = id;
        j["name"] = name;
        j["input"] = input;
        break;
    }
    return j;
  }
};

class MessagesGenerator : public ChunkGenerator {
 public:
  explicit MessagesGenerator(const GeneratorOptions& o)
      : id_(o.id), model_(o.model), thinking_(o.thinking_mode), signature_(o.signature.value_or(o.id)) {}

  std::vector<StreamEvent> generate(const OutputChunk& chunk) override {
    std::vector<StreamEvent> events;
    if (finished_) return events;
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart: {
        if (started_) break;
        started_ = true;
        prompt_usage_ = chunk.prompt_usage;
        Json e = Json::object();
        e["type"] = "message_start";
        e["message"] = message(usage(CompletionUsage{}), std::nullopt, std::nullopt, /*with_content=*/false);
        events.push_back({"message_start", std::move(e)});
        if (thinking_) open_block(Block{Block::Type::kThinking}, events);
        break;
      }
      case OutputChunk::Kind::kRaw:
        if (!active(Block::Type::kText)) open_block(Block{Block::Type::kText}, events);
        blocks_.back().text += chunk.text;
        delta(events, "text_delta", "text", chunk.text);
        break;
      case OutputChunk::Kind::kReasoning:
        if (!active(Block::Type::kThinking)) open_block(Block{Block::Type::kThinking}, events);
        blocks_.back().text += chunk.text;
        delta(events, "thinking_delta", "thinking", chunk.text);
        break;
      case OutputChunk::Kind::kToolCall: {
        Block block{Block::Type::kToolUse};
        block.id = core::str_cat("toolu_", id_, "_", tool_calls_++);
        block.name = chunk.text;
        open_block(std::move(block), events);
        break;
      }
      case OutputChunk::Kind::kToolArgumentsDelta:
        if (active(Block::Type::kToolUse)) {
          blocks_.back().partial_json += chunk.text;
          delta(events, "input_json_delta", "partial_json", chunk.text);
        }
        break;
      case OutputChunk::Kind::kFinish: {
        close_block(events);
        stop_reason_ = stop_reason(chunk.finish_reason);
        stop_sequence_ = chunk.stop_sequence;
        final_usage_ = usage(chunk.completion_usage);
        Json d = Json::object();
        d["stop_reason"] = *stop_reason_;
        d["stop_sequence"] = stop_sequence_ ? Json(*stop_sequence_) : Json(nullptr);
        Json e = Json::object();
        e["type"] = "message_delta";
        e["delta"] = std::move(d);
        e["usage"] = *final_usage_;
        events.push_back({"message_delta", std::move(e)});
        Json stop = Json::object();
        stop["type"] = "message_stop";
        events.push_back({"message_stop", std::move(stop)});
        finished_ = true;
        break;
      }
      case OutputChunk::Kind::kToolCallBegin:
        break;
    }
    return events;
  }

  Json response() const override {
    return message(final_usage_ ? *final_usage_ : usage(CompletionUsage{}), stop_reason_, stop_sequence_, true);
  }

 private:
  Json usage(const CompletionUsage& completion) const {
    Json u = Json::object();
    u["input_tokens"] = std::max<int64_t>(prompt_usage_.prompt_tokens - prompt_usage_.prompt_cache_hit_tokens, 0);
    u["cache_creation_input_tokens"] = 0;
    u["cache_read_input_tokens"] = prompt_usage_.prompt_cache_hit_tokens;
    u["output_tokens"] = completion.completion_tokens;
    u["service_tier"] = "standard";
    return u;
  }

  Json message(Json usage, const std::optional<std::string>& stop_reason, const std::optional<std::string>& stop_sequence,
               bool with_content) const {
    Json m = Json::object();
    m["id"] = id_;
    m["type"] = "message";
    m["role"] = "assistant";
    m["model"] = model_;
    Json content = Json::array();
    if (with_content)
      for (const auto& b : blocks_) content.push_back(b.to_json());
    m["content"] = std::move(content);
    m["stop_reason"] = stop_reason ? Json(*stop_reason) : Json(nullptr);
    m["stop_sequence"] = stop_sequence ? Json(*stop_sequence) : Json(nullptr);
    m["usage"] = std::move(usage);
    return m;
  }

  bool active(Block::Type type) const { return open_ && blocks_.back().type == type; }

  void delta(std::vector<StreamEvent>& events, const char* type, const char* key, const std::string& value) {
    Json d = Json::object();
    d["type"] = type;
    d[key] = value;
    Json e = Json::object();
    e["type"] = "content_block_delta";
    e["index"] = blocks_.size() - 1;
    e["delta"] = std::move(d);
    events.push_back({"content_block_delta", std::move(e)});
  }

  void open_block(Block block, std::vector<StreamEvent>& events) {
    close_block(events);
    Json e = Json::object();
    e["type"] = "content_block_start";
    e["index"] = blocks_.size();
    e["content_block"] = block.to_json();
    events.push_back({"content_block_start", std::move(e)});
    if (blocks_.empty()) {
      Json ping = Json::object();
      ping["type"] = "ping";
      events.push_back({"ping", std::move(ping)});
    }
    blocks_.push_back(std::move(block));
    open_ = true;
  }

  void close_block(std::vector<StreamEvent>& events) {
    if (!open_) return;
    open_ = false;
    Block& block = blocks_.back();
    const size_t index = blocks_.size() - 1;
    if (block.type == Block::Type::kThinking) {
      block.signature += signature_;
      delta(events, "signature_delta", "signature", signature_);
    }
    if (block.type == Block::Type::kToolUse) {
      // The complete input is the parsed fragments; a truncated or invalid call becomes {}.
      try {
        block.input = parse_json(block.partial_json);
      } catch (const std::exception&) {
        block.input = Json::object();
      }
    }
    Json e = Json::object();
    e["type"] = "content_block_stop";
    e["index"] = index;
    events.push_back({"content_block_stop", std::move(e)});
  }

  std::string id_, model_;
  bool thinking_;
  std::string signature_;
  bool started_ = false, finished_ = false, open_ = false;
  int64_t tool_calls_ = 0;
  PromptUsage prompt_usage_;
  std::vector<Block> blocks_;
  std::optional<std::string> stop_reason_, stop_sequence_;
  std::optional<Json> final_usage_;
};

}  // namespace

std::unique_ptr<ChunkGenerator> make_messages_generator(const GeneratorOptions& options) {
  return std::make_unique<MessagesGenerator>(options);
}

}  // namespace dsinfer::recipe::stream
