#include "server/choice_sse.h"

namespace dsinfer::server {

using Json = recipe::Json;

std::string ChoiceSseMerger::rewrite(std::string_view frames, size_t index) {
  std::string out;
  constexpr std::string_view kData = "data: ";
  while (!frames.empty()) {
    const size_t end = frames.find("\n\n");
    const std::string_view frame = frames.substr(0, end);
    frames = end == std::string_view::npos ? std::string_view() : frames.substr(end + 2);
    if (frame.rfind(kData, 0) != 0) {  // not a data frame: passed on as it is
      out.append(frame).append("\n\n");
      continue;
    }
    const std::string_view data = frame.substr(kData.size());
    if (data == "[DONE]") continue;  // one terminator, from finish()
    Json j = recipe::parse_json(data);
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      have_usage_ = true;
      completion_tokens_ += u->value("completion_tokens", int64_t{0});
      if (auto d = u->find("completion_tokens_details"); d != u->end() && d->is_object() && d->contains("reasoning_tokens")) {
        reasoning_tokens_ += d->value("reasoning_tokens", int64_t{0});
        have_reasoning_ = true;
      }
      usage_chunk_ = j;
      usage_chunk_["choices"] = Json::array();
      *u = nullptr;
    }
    auto c = j.find("choices");
    if (c != j.end() && c->is_array()) {
      if (c->empty()) continue;  // a usage-only chunk: merged in finish()
      for (auto& choice : *c) choice["index"] = static_cast<int64_t>(index);
    }
    out.append(kData).append(recipe::to_compact_json(j)).append("\n\n");
  }
  return out;
}

std::string ChoiceSseMerger::finish() const {
  std::string out;
  if (have_usage_) {
    Json j = usage_chunk_;
    Json& u = j["usage"];
    u["completion_tokens"] = completion_tokens_;
    u["total_tokens"] = u.value("prompt_tokens", int64_t{0}) + completion_tokens_;
    if (have_reasoning_) u["completion_tokens_details"]["reasoning_tokens"] = reasoning_tokens_;
    out += "data: " + recipe::to_compact_json(j) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

}  // namespace dsinfer::server
