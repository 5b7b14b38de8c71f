#include "router/worker_protocol.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsinfer::router {
namespace {

using Json = nlohmann::json;

// The protocol's name for "trailing tokens of prompt_ids that are output already" (penalties count them,
// sampling positions continue after them).
constexpr const char* kGeneratedBefore = "generated_before";

Json sampling_json(const engine::SamplingParams& s) {
  Json bias = Json::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back(Json::array({id, b}));
  return Json{{"temperature", s.temperature},
              {"top_p", s.top_p},
              {"top_k", s.top_k},
              {"min_p", s.min_p},
              {"seed", s.seed},
              {"stream_key", s.stream_key},
              {"logit_bias", std::move(bias)},
              {"presence_penalty", s.presence_penalty},
              {"frequency_penalty", s.frequency_penalty},
              {"repetition_penalty", s.repetition_penalty},
              {"top_logprobs", s.top_logprobs}};
}

Json common_json(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer) {
  return Json{{"transfer", transfer},
              {"prompt_ids", progress.next_prompt(spec.prompt_ids)},
              {kGeneratedBefore, progress.generated.size()},
              {"sampling", sampling_json(spec.sampling)},
              {"stop_token_ids", spec.stop_token_ids},
              {"ignore_eos", spec.ignore_eos},
              {"max_tokens", progress.remaining(spec.max_tokens)},
              {"traffic_class", spec.traffic_class}};
}

Json parse_object(std::string_view text, const char* what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  DSINFER_CHECK(j.is_object(), "router: malformed ", what, " from a worker: ", std::string(text.substr(0, 200)));
  return j;
}

int64_t int_field(const Json& j, const char* name, int64_t fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  DSINFER_CHECK(it->is_number_integer(), "router: worker field '", name, "' is not an integer");
  return it->get<int64_t>();
}

// One token's logprobs: {"logprob": x, "top": [{"token": t, "logprob": l}, ...]} ([t, l] pairs accepted too).
engine::TokenLogprobs logprobs_from(const Json& j) {
  DSINFER_CHECK(j.is_object() && j.contains("logprob") && j["logprob"].is_number(),
                "router: malformed logprobs from a worker");
  engine::TokenLogprobs out;
  out.logprob = j["logprob"].get<float>();
  if (auto it = j.find("top"); it != j.end() && it->is_array()) {
    for (const Json& e : *it) {
      if (e.is_array() && e.size() == 2) out.top.push_back({e[0].get<int32_t>(), e[1].get<float>()});
      else if (e.is_object()) out.top.push_back({e.at("token").get<int32_t>(), e.at("logprob").get<float>()});
      else core::fail("router: malformed top logprob from a worker");
    }
  }
  return out;
}

}  // namespace

std::vector<int32_t> RequestProgress::next_prompt(const std::vector<int32_t>& prompt) const {
  std::vector<int32_t> out = prompt;
  out.insert(out.end(), generated.begin(), generated.end());
  return out;
}

int32_t RequestProgress::remaining(int32_t max_tokens) const {
  return max_tokens - static_cast<int32_t>(generated.size());
}

std::string prefill_request_json(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer,
                                 const std::string& decode_ucx_address) {
  Json j = common_json(spec, progress, transfer);
  j["decode_ucx_address"] = decode_ucx_address;
  return j.dump();
}

std::string decode_request_json(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer,
                                int32_t first_token) {
  Json j = common_json(spec, progress, transfer);
  j["first_token"] = first_token;
  return j.dump();
}

engine::FinishReason finish_from_name(std::string_view name) {
  if (name == "none") return engine::FinishReason::kNone;
  if (name == "stop") return engine::FinishReason::kStop;
  if (name == "length") return engine::FinishReason::kLength;
  if (name == "cancelled") return engine::FinishReason::kCancelled;
  if (name == "error") return engine::FinishReason::kError;
  core::fail("router: unknown finish reason '", std::string(name), "' from a worker");
}

const char* finish_name(engine::FinishReason finish) {
  switch (finish) {
    case engine::FinishReason::kNone: return "none";
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kCancelled: return "cancelled";
    case engine::FinishReason::kError: return "error";
  }
  return "error";
}

PrefillReply parse_prefill_reply(std::string_view body) {
  const Json j = parse_object(body, "prefill reply");
  try {
    PrefillReply r;
    DSINFER_CHECK(j.contains("first_token") && j["first_token"].is_number_integer(),
                  "router: prefill reply without first_token");
    r.first_token = j["first_token"].get<int32_t>();
    r.finish = finish_from_name(j.value("finish", std::string("none")));
    r.matched_stop_token = static_cast<int32_t>(int_field(j, "matched_stop_token", -1));
    if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) r.logprobs = logprobs_from(*it);
    r.prompt_tokens = int_field(j, "prompt_tokens", 0);
    r.cached_tokens = int_field(j, "cached_tokens", 0);
    r.state_bytes = int_field(j, "state_bytes", 0);
    return r;
  } catch (const Json::exception& e) {
    core::fail("router: malformed prefill reply from a worker: ", e.what());
  }
}

DecodeLine parse_decode_line(std::string_view line) {
  const Json j = parse_object(line, "decode stream line");
  try {
    DecodeLine d;
    if (auto it = j.find("finish"); it != j.end() && !it->is_null()) {
      d.last = true;
      d.finish = finish_from_name(it->get<std::string>());
      DSINFER_CHECK(d.finish != engine::FinishReason::kNone, "router: decode stream ended with finish 'none'");
      d.matched_stop_token = static_cast<int32_t>(int_field(j, "matched_stop_token", -1));
      if (auto e = j.find("error"); e != j.end() && e->is_string()) d.error = e->get<std::string>();
    }
    if (auto it = j.find("tokens"); it != j.end() && !it->is_null()) d.tokens = it->get<std::vector<int32_t>>();
    if (auto it = j.find("logprobs"); it != j.end() && it->is_array()) {
      for (const Json& e : *it) d.logprobs.push_back(logprobs_from(e));
      DSINFER_CHECK(d.logprobs.size() == d.tokens.size(), "router: decode line with ", d.tokens.size(),
                    " tokens but ", d.logprobs.size(), " logprobs");
    }
    DSINFER_CHECK(d.last || !d.tokens.empty(), "router: decode stream line with neither tokens nor finish");
    return d;
  } catch (const Json::exception& e) {
    core::fail("router: malformed decode stream line from a worker: ", e.what());
  }
}

void LineSplitter::feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(bytes);
      return;
    }
    partial_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    std::string line = std::move(partial_);
    partial_.clear();
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) on_line(line);
  }
}

Heartbeat parse_heartbeat(std::string_view body) {
  const Json j = parse_object(body, "heartbeat");
  try {
    Heartbeat h;
    h.id = j.at("id").get<std::string>();
    DSINFER_CHECK(!h.id.empty(), "heartbeat: empty id");
    const std::string role = j.at("role").get<std::string>();
    DSINFER_CHECK(role == "prefill" || role == "decode", "heartbeat: role must be prefill or decode, got '", role,
                  "'");
    h.prefill = role == "prefill";
    h.url = j.at("url").get<std::string>();
    DSINFER_CHECK(h.url.rfind("http://", 0) == 0, "heartbeat: url must start with http://, got '", h.url, "'");
    h.ucx_address = j.value("ucx_address", std::string());
    if (auto c = j.find("capacity"); c != j.end() && c->is_object()) {
      h.max_running = int_field(*c, "max_running", 0);
      h.kv_tokens = int_field(*c, "kv_tokens", 0);
    }
    if (auto l = j.find("load"); l != j.end() && l->is_object()) {
      h.running = int_field(*l, "running", 0);
      h.waiting = int_field(*l, "waiting", 0);
      h.kv_tokens_used = int_field(*l, "kv_tokens_used", 0);
    }
    return h;
  } catch (const Json::exception& e) {
    core::fail("heartbeat: ", e.what());
  }
}

}  // namespace dsinfer::router
