// OpenAI Responses events: created / in_progress, then output items opened and closed as the output kind
// changes (reasoning, message, function_call, custom_tool_call), then completed or incomplete. Every event
// has a sequence_number counting from 0.
#include <set>

#include "recipe/stream/chunk_generator.h"
#include "recipe/stream/custom_tool_input.h"

namespace dsinfer::recipe::stream {
namespace {

struct Item {
  enum class Type { kReasoning, kMessage, kFunctionCall, kCustomToolCall };
  Type type = Type::kMessage;
  std::string id;
  std::string status = "in_progress";
  std::string phase = "final_answer";  // message
  std::string text;                    // reasoning / message content part
  std::string call_id, name;
  std::optional<std::string> ns;       // function_call namespace
  std::string arguments;               // function_call arguments, custom_tool_call input

  bool is_text() const { return type == Type::kReasoning || type == Type::kMessage; }

  Json part() const {
    Json p = Json::object();
    if (type == Type::kReasoning) {
      p["type"] = "reasoning_text";
    } else {
      p["type"] = "output_text";
      p["annotations"] = Json::array();
      p["logprobs"] = Json::array();
    }
    p["text"] = text;
    return p;
  }

  // with_part false: the item as output_item.added shows it (its content part is announced separately).
  Json to_json(bool with_part = true) const {
    Json j = Json::object();
    switch (type) {
      case Type::kReasoning:
        j["type"] = "reasoning";
        j["id"] = id;
        j["status"] = status;
        j["content"] = with_part ? Json::array({part()}) : Json::array();
        j["summary"] = Json::array();
        break;
      case Type::kMessage:
        j["type"] = "message";
        j["id"] = id;
        j["status"] = status;
        j["role"] = "assistant";
        j["phase"] = phase;
        j["content"] = with_part ? Json::array({part()}) : Json::array();
        break;
      case Type::kFunctionCall:
        j["type"] = "function_call";
        j["id"] = id;
        j["status"] = status;
        j["call_id"] = call_id;
        j["name"] = name;
        if (ns) j["namespace"] = *ns;
        j["arguments"] = arguments;
        break;
      case Type::kCustomToolCall:
        j["type"] = "custom_tool_call";
        j["id"] = id;
        j["status"] = status;
        j["call_id"] = call_id;
        j["name"] = name;
        j["input"] = arguments;
        break;
    }
    return j;
  }
};

class ResponsesGenerator : public ChunkGenerator {
 public:
  explicit ResponsesGenerator(const GeneratorOptions& o)
      : id_(o.id), model_(o.model), created_(o.created.value_or(unix_now())),
        custom_names_(o.custom_tool_names.begin(), o.custom_tool_names.end()) {}

  std::vector<StreamEvent> generate(const OutputChunk& chunk) override {
    std::vector<StreamEvent> events;
    if (finished_) return events;
    if (chunk.kind != OutputChunk::Kind::kStart && !started_) return events;
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart:
        if (started_) break;
        started_ = true;
        prompt_usage_ = chunk.prompt_usage;
        push(events, "response.created", {{"response", response()}});
        push(events, "response.in_progress", {{"response", response()}});
        break;
      case OutputChunk::Kind::kRaw: append_text(chunk.text, false, events); break;
      case OutputChunk::Kind::kReasoning: append_text(chunk.text, true, events); break;
      case OutputChunk::Kind::kToolCall: start_tool_call(chunk.text, events); break;
      case OutputChunk::Kind::kToolArgumentsDelta: append_arguments(chunk.text, events); break;
      case OutputChunk::Kind::kFinish: finish(chunk, events); break;
      case OutputChunk::Kind::kToolCallBegin: break;
    }
    return events;
  }

  Json response() const override {
    Json r = Json::object();
    r["id"] = id_;
    r["object"] = "response";
    r["created_at"] = created_;
    r["model"] = model_;
    r["status"] = status_;
    r["completed_at"] = completed_at_ ? Json(*completed_at_) : Json(nullptr);
    r["error"] = nullptr;
    if (incomplete_reason_) {
      Json details = Json::object();
      details["reason"] = *incomplete_reason_;
      r["incomplete_details"] = std::move(details);
    } else {
      r["incomplete_details"] = nullptr;
    }
    Json output = Json::array();
    for (const auto& item : items_) output.push_back(item.to_json());
    r["output"] = std::move(output);
    r["usage"] = usage_ ? *usage_ : Json(nullptr);
    return r;
  }

 private:
  // Events are {"type", ...fields..., "sequence_number"} with the fields in the given order.
  void push(std::vector<StreamEvent>& events, const char* type,
            std::initializer_list<std::pair<const char*, Json>> fields) {
    Json e = Json::object();
    e["type"] = type;
    for (const auto& [k, v] : fields) e[k] = v;
    e["sequence_number"] = sequence_++;
    events.push_back({type, std::move(e)});
  }
  // For events whose "sequence_number" sits between fields (the alphabetical order of the reference).
  void push_ordered(std::vector<StreamEvent>& events, const char* type, std::vector<std::pair<const char*, Json>> fields) {
    Json e = Json::object();
    e["type"] = type;
    for (auto& [k, v] : fields) {
      if (std::string_view(k) == "sequence_number") e[k] = sequence_++;
      else e[k] = std::move(v);
    }
    events.push_back({type, std::move(e)});
  }

  void open_item(Item item, std::vector<StreamEvent>& events) {
    const int64_t index = static_cast<int64_t>(items_.size());
    items_.push_back(std::move(item));
    active_ = index;
    const Item& it = items_.back();
    push(events, "response.output_item.added", {{"item", it.to_json(false)}, {"output_index", index}});
    if (it.is_text()) {
      Item empty = it;
      empty.text.clear();
      push_ordered(events, "response.content_part.added",
                   {{"content_index", 0}, {"item_id", it.id}, {"output_index", index}, {"part", empty.part()},
                    {"sequence_number", nullptr}});
    }
  }

  void close_item(const std::string& status, std::vector<StreamEvent>& events) {
    if (!active_) return;
    const int64_t index = *active_;
    active_.reset();
    if (custom_input_) {
      append_custom_input(index, custom_input_->finish(), events);
      custom_input_.reset();
    }
    Item& item = items_[static_cast<size_t>(index)];
    item.status = status;
    switch (item.type) {
      case Item::Type::kReasoning:
        push_ordered(events, "response.reasoning_text.done",
                     {{"content_index", 0}, {"item_id", item.id}, {"output_index", index}, {"sequence_number", nullptr},
                      {"text", item.text}});
        break;
      case Item::Type::kMessage:
        push_ordered(events, "response.output_text.done",
                     {{"content_index", 0}, {"item_id", item.id}, {"logprobs", Json::array()}, {"output_index", index},
                      {"sequence_number", nullptr}, {"text", item.text}});
        break;
      case Item::Type::kFunctionCall:
        push(events, "response.function_call_arguments.done",
             {{"arguments", item.arguments}, {"item_id", item.id}, {"output_index", index}});
        break;
      case Item::Type::kCustomToolCall:
        push(events, "response.custom_tool_call_input.done",
             {{"input", item.arguments}, {"item_id", item.id}, {"output_index", index}});
        break;
    }
    if (item.is_text())
      push_ordered(events, "response.content_part.done",
                   {{"content_index", 0}, {"item_id", item.id}, {"output_index", index}, {"part", item.part()},
                    {"sequence_number", nullptr}});
    push(events, "response.output_item.done", {{"item", item.to_json()}, {"output_index", index}});
  }

  void append_text(const std::string& delta, bool reasoning, std::vector<StreamEvent>& events) {
    const Item::Type type = reasoning ? Item::Type::kReasoning : Item::Type::kMessage;
    if (!active_ || items_[static_cast<size_t>(*active_)].type != type) {
      close_item("completed", events);
      Item item;
      item.type = type;
      item.id = core::str_cat(reasoning ? "rs_" : "msg_", id_, "_", items_.size());
      open_item(std::move(item), events);
    }
    const int64_t index = *active_;
    Item& item = items_[static_cast<size_t>(index)];
    item.text += delta;
    if (reasoning)
      push_ordered(events, "response.reasoning_text.delta",
                   {{"content_index", 0}, {"delta", delta}, {"item_id", item.id}, {"output_index", index},
                    {"sequence_number", nullptr}});
    else
      push_ordered(events, "response.output_text.delta",
                   {{"content_index", 0}, {"delta", delta}, {"item_id", item.id}, {"logprobs", Json::array()},
                    {"output_index", index}, {"sequence_number", nullptr}});
  }

  void start_tool_call(const std::string& name, std::vector<StreamEvent>& events) {
    if (active_ && items_[static_cast<size_t>(*active_)].type == Item::Type::kMessage)
      items_[static_cast<size_t>(*active_)].phase = "commentary";
    close_item("completed", events);
    Item item;
    item.call_id = core::str_cat("call_", id_, "_", tool_calls_++);
    if (custom_names_.count(name)) {
      item.type = Item::Type::kCustomToolCall;
      item.id = core::str_cat("ctc_", id_, "_", items_.size());
      item.name = name;
      custom_input_.emplace();
    } else {
      item.type = Item::Type::kFunctionCall;
      item.id = core::str_cat("fc_", id_, "_", items_.size());
      // A flattened namespace member ("ns::name") is reported with its namespace again.
      if (const size_t sep = name.find("::"); sep != std::string::npos) {
        item.ns = name.substr(0, sep);
        item.name = name.substr(sep + 2);
      } else {
        item.name = name;
      }
    }
    open_item(std::move(item), events);
  }

  void append_arguments(const std::string& delta, std::vector<StreamEvent>& events) {
    if (!active_) return;
    const int64_t index = *active_;
    Item& item = items_[static_cast<size_t>(index)];
    if (item.type == Item::Type::kFunctionCall) {
      item.arguments += delta;
      push(events, "response.function_call_arguments.delta", {{"delta", delta}, {"item_id", item.id}, {"output_index", index}});
    } else if (item.type == Item::Type::kCustomToolCall && custom_input_) {
      append_custom_input(index, custom_input_->feed(delta), events);
    }
  }

  void append_custom_input(int64_t index, const std::string& delta, std::vector<StreamEvent>& events) {
    if (delta.empty()) return;
    Item& item = items_[static_cast<size_t>(index)];
    item.arguments += delta;
    push(events, "response.custom_tool_call_input.delta", {{"delta", delta}, {"item_id", item.id}, {"output_index", index}});
  }

  void finish(const OutputChunk& chunk, std::vector<StreamEvent>& events) {
    if (chunk.finish_reason == FinishReason::kLength) incomplete_reason_ = "max_output_tokens";
    else if (chunk.finish_reason == FinishReason::kContentFilter) incomplete_reason_ = "content_filter";
    status_ = incomplete_reason_ ? "incomplete" : "completed";
    Json usage = Json::object();
    usage["input_tokens"] = prompt_usage_.prompt_tokens;
    Json input_details = Json::object();
    input_details["cached_tokens"] = prompt_usage_.prompt_cache_hit_tokens;
    usage["input_tokens_details"] = std::move(input_details);
    usage["output_tokens"] = chunk.completion_usage.completion_tokens;
    Json output_details = Json::object();
    output_details["reasoning_tokens"] = 0;
    usage["output_tokens_details"] = std::move(output_details);
    usage["total_tokens"] = prompt_usage_.prompt_tokens + chunk.completion_usage.completion_tokens;
    usage_ = std::move(usage);
    completed_at_ = unix_now();
    close_item(status_, events);
    push(events, status_ == "incomplete" ? "response.incomplete" : "response.completed", {{"response", response()}});
    finished_ = true;
  }

  std::string id_, model_;
  int64_t created_;
  std::set<std::string> custom_names_;
  bool started_ = false, finished_ = false;
  int64_t sequence_ = 0;
  int64_t tool_calls_ = 0;
  PromptUsage prompt_usage_;
  std::vector<Item> items_;
  std::optional<int64_t> active_;
  std::optional<CustomToolInputDecoder> custom_input_;
  std::string status_ = "in_progress";
  std::optional<int64_t> completed_at_;
  std::optional<std::string> incomplete_reason_;
  std::optional<Json> usage_;
};

}  // namespace

std::unique_ptr<ChunkGenerator> make_responses_generator(const GeneratorOptions& options) {
  return std::make_unique<ResponsesGenerator>(options);
}

}  // namespace dsinfer::recipe::stream
