#include "router/worker_protocol.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsinfer::router {
namespace {

using Json = nlohmann::json;

Json parse_object(std::string_view text, const char* what) {
  Json j = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  DSINFER_CHECK(j.is_object(), "malformed ", what, " (not a JSON object): ", std::string(text.substr(0, 200)));
  return j;
}

// Fields by name, so a message that is wrong is refused naming the field.
template <class T>
T field(const Json& j, const char* name, T fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception& e) {
    core::fail("field \"", name, "\": ", e.what());
  }
}

template <class T>
T required(const Json& j, const char* name) {
  auto it = j.find(name);
  DSINFER_CHECK(it != j.end() && !it->is_null(), "field \"", name, "\" is required");
  return field<T>(j, name, T{});
}

int64_t int_field(const Json& j, const char* name, int64_t fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  DSINFER_CHECK(it->is_number_integer(), "field \"", name, "\" is not an integer");
  return it->get<int64_t>();
}

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

engine::SamplingParams sampling_from(const Json& j) {
  DSINFER_CHECK(j.is_object(), "\"sampling\" must be an object");
  engine::SamplingParams s;
  s.temperature = field<float>(j, "temperature", s.temperature);
  s.top_p = field<float>(j, "top_p", s.top_p);
  s.top_k = field<int32_t>(j, "top_k", s.top_k);
  s.min_p = field<float>(j, "min_p", s.min_p);
  s.seed = field<uint64_t>(j, "seed", s.seed);
  s.stream_key = field<uint64_t>(j, "stream_key", s.stream_key);
  s.presence_penalty = field<float>(j, "presence_penalty", s.presence_penalty);
  s.frequency_penalty = field<float>(j, "frequency_penalty", s.frequency_penalty);
  s.repetition_penalty = field<float>(j, "repetition_penalty", s.repetition_penalty);
  s.top_logprobs = field<int32_t>(j, "top_logprobs", s.top_logprobs);
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    DSINFER_CHECK(it->is_array(), "\"logit_bias\" must be an array of [id, bias]");
    for (const Json& pair : *it) {
      DSINFER_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_number_integer() && pair[1].is_number(),
                    "\"logit_bias\" entries must be [id, bias]");
      s.logit_bias.emplace_back(pair[0].get<int32_t>(), pair[1].get<float>());
    }
  }
  return s;
}

// One token's logprobs: {"logprob": x, "top": [[id, logprob], ...]}.
Json logprobs_json(const engine::TokenLogprobs& lp) {
  Json top = Json::array();
  for (const auto& t : lp.top) top.push_back(Json::array({t.token, t.logprob}));
  return Json{{"logprob", lp.logprob}, {"top", std::move(top)}};
}

engine::TokenLogprobs logprobs_from(const Json& j) {
  DSINFER_CHECK(j.is_object() && j.contains("logprob") && j["logprob"].is_number(), "malformed logprobs");
  engine::TokenLogprobs out;
  out.logprob = j["logprob"].get<float>();
  if (auto it = j.find("top"); it != j.end() && !it->is_null()) {
    DSINFER_CHECK(it->is_array(), "malformed top logprobs");
    for (const Json& e : *it) {
      DSINFER_CHECK(e.is_array() && e.size() == 2 && e[0].is_number_integer() && e[1].is_number(),
                    "top logprobs must be [id, logprob] pairs");
      out.top.push_back({e[0].get<int32_t>(), e[1].get<float>()});
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

HandoffRequest handoff_request(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer) {
  HandoffRequest r;
  r.transfer = transfer;
  r.prompt_ids = progress.next_prompt(spec.prompt_ids);
  r.sampling = spec.sampling;
  r.stop_token_ids = spec.stop_token_ids;
  r.ignore_eos = spec.ignore_eos;
  // The whole request's budget: the worker counts output_in_prompt toward it (RequestSpec).
  r.max_tokens = spec.max_tokens;
  r.traffic_class = spec.traffic_class;
  r.output_in_prompt = spec.output_in_prompt + static_cast<int32_t>(progress.generated.size());
  if (spec.constraint) r.constraint = spec.constraint->source();
  return r;
}

std::string handoff_request_json(const HandoffRequest& r, bool decode) {
  Json j{{"transfer", r.transfer},
         {"prompt_ids", r.prompt_ids},
         {"sampling", sampling_json(r.sampling)},
         {"stop_token_ids", r.stop_token_ids},
         {"ignore_eos", r.ignore_eos},
         {"max_tokens", r.max_tokens},
         {"traffic_class", r.traffic_class},
         {"output_in_prompt", r.output_in_prompt}};
  if (!r.constraint.empty()) j["constraint"] = r.constraint;
  if (decode) {
    j["first_token"] = r.first_token;
  } else {
    j["decode_ucx_address"] = r.decode_ucx_address;
  }
  return j.dump();
}

HandoffRequest parse_handoff_request(std::string_view body, bool decode) {
  const Json j = parse_object(body, decode ? "decode request" : "prefill request");
  HandoffRequest r;
  r.transfer = required<uint64_t>(j, "transfer");
  DSINFER_CHECK(r.transfer < kMaxTransferId, "\"transfer\" must be below 2^56");
  r.prompt_ids = required<std::vector<int32_t>>(j, "prompt_ids");
  DSINFER_CHECK(!r.prompt_ids.empty(), "\"prompt_ids\" is empty");
  if (auto it = j.find("sampling"); it != j.end() && !it->is_null()) r.sampling = sampling_from(*it);
  r.stop_token_ids = field<std::vector<int32_t>>(j, "stop_token_ids", {});
  r.ignore_eos = field<bool>(j, "ignore_eos", false);
  r.max_tokens = required<int32_t>(j, "max_tokens");
  r.traffic_class = field<std::string>(j, "traffic_class", "default");
  r.output_in_prompt = field<int32_t>(j, "output_in_prompt", 0);
  DSINFER_CHECK(r.output_in_prompt >= 0 && r.output_in_prompt < static_cast<int64_t>(r.prompt_ids.size()),
                "\"output_in_prompt\" must leave at least one prompt token");
  r.constraint = field<std::string>(j, "constraint", "");
  if (decode) {
    r.first_token = required<int32_t>(j, "first_token");
  } else {
    r.decode_ucx_address = field<std::string>(j, "decode_ucx_address", "");
  }
  return r;
}

engine::RequestSpec to_spec(const HandoffRequest& r) {
  engine::RequestSpec s;
  s.prompt_ids = r.prompt_ids;
  s.max_tokens = r.max_tokens;
  s.sampling = r.sampling;
  s.stop_token_ids = r.stop_token_ids;
  s.ignore_eos = r.ignore_eos;
  s.traffic_class = r.traffic_class;
  s.output_in_prompt = r.output_in_prompt;
  return s;
}

engine::FinishReason finish_from_name(std::string_view name) {
  if (name == "none") return engine::FinishReason::kNone;
  if (name == "stop") return engine::FinishReason::kStop;
  if (name == "length") return engine::FinishReason::kLength;
  if (name == "cancelled") return engine::FinishReason::kCancelled;
  if (name == "error") return engine::FinishReason::kError;
  core::fail("unknown finish reason '", std::string(name), "'");
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

std::string prefill_reply_json(const PrefillReply& r) {
  return Json{{"first_token", r.first_token},
              {"finish", finish_name(r.finish)},
              {"matched_stop_token", r.matched_stop_token},
              {"logprobs", r.logprobs ? logprobs_json(*r.logprobs) : Json(nullptr)},
              {"prompt_tokens", r.prompt_tokens},
              {"cached_tokens", r.cached_tokens},
              {"state_bytes", r.state_bytes}}
      .dump();
}

PrefillReply parse_prefill_reply(std::string_view body) {
  const Json j = parse_object(body, "prefill reply");
  try {
    PrefillReply r;
    DSINFER_CHECK(j.contains("first_token") && j["first_token"].is_number_integer(), "prefill reply without first_token");
    r.first_token = j["first_token"].get<int32_t>();
    r.finish = finish_from_name(j.value("finish", std::string("none")));
    r.matched_stop_token = static_cast<int32_t>(int_field(j, "matched_stop_token", -1));
    if (auto it = j.find("logprobs"); it != j.end() && !it->is_null()) r.logprobs = logprobs_from(*it);
    r.prompt_tokens = int_field(j, "prompt_tokens", 0);
    r.cached_tokens = int_field(j, "cached_tokens", 0);
    r.state_bytes = int_field(j, "state_bytes", 0);
    return r;
  } catch (const Json::exception& e) {
    core::fail("malformed prefill reply: ", e.what());
  }
}

std::string decode_line_json(const DecodeLine& d) {
  Json j = Json::object();
  if (!d.tokens.empty()) {
    j["tokens"] = d.tokens;
    Json lps = nullptr;
    if (!d.logprobs.empty()) {
      lps = Json::array();
      for (const auto& lp : d.logprobs) lps.push_back(logprobs_json(lp));
    }
    j["logprobs"] = std::move(lps);
  }
  if (d.last) {
    j["finish"] = finish_name(d.finish);
    j["matched_stop_token"] = d.matched_stop_token;
    j["error"] = d.error;
  }
  return j.dump() + "\n";
}

DecodeLine parse_decode_line(std::string_view line) {
  const Json j = parse_object(line, "decode stream line");
  try {
    DecodeLine d;
    if (auto it = j.find("finish"); it != j.end() && !it->is_null()) {
      d.last = true;
      d.finish = finish_from_name(it->get<std::string>());
      DSINFER_CHECK(d.finish != engine::FinishReason::kNone, "decode stream ended with finish 'none'");
      d.matched_stop_token = static_cast<int32_t>(int_field(j, "matched_stop_token", -1));
      if (auto e = j.find("error"); e != j.end() && e->is_string()) d.error = e->get<std::string>();
    }
    if (auto it = j.find("tokens"); it != j.end() && !it->is_null()) d.tokens = it->get<std::vector<int32_t>>();
    if (auto it = j.find("logprobs"); it != j.end() && it->is_array()) {
      for (const Json& e : *it) d.logprobs.push_back(logprobs_from(e));
      DSINFER_CHECK(d.logprobs.size() == d.tokens.size(), "decode line with ", d.tokens.size(), " tokens but ",
                    d.logprobs.size(), " logprobs");
    }
    DSINFER_CHECK(d.last || !d.tokens.empty(), "decode stream line with neither tokens nor finish");
    return d;
  } catch (const Json::exception& e) {
    core::fail("malformed decode stream line: ", e.what());
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

std::string heartbeat_json(const Heartbeat& h) {
  return Json{{"id", h.id},
              {"role", h.prefill ? "prefill" : "decode"},
              {"url", h.url},
              {"ucx_address", h.ucx_address},
              {"capacity", {{"max_running", h.max_running}, {"kv_tokens", h.kv_tokens}}},
              {"load", {{"running", h.running}, {"waiting", h.waiting}, {"kv_tokens_used", h.kv_tokens_used},
                        {"prefill_tokens", h.prefill_tokens}}}}
      .dump();
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
      h.prefill_tokens = int_field(*l, "prefill_tokens", 0);
    }
    return h;
  } catch (const Json::exception& e) {
    core::fail("heartbeat: ", e.what());
  }
}

}  // namespace dsinfer::router
