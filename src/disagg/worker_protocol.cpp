#include "disagg/worker_protocol.h"

#include "core/error.h"

namespace dsinfer::disagg {
namespace {

template <class T>
T field(const WireJson& j, const char* name, T fallback) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const std::exception& e) {
    core::fail("field \"", name, "\": ", e.what());
  }
}

template <class T>
T required(const WireJson& j, const char* name) {
  auto it = j.find(name);
  DSINFER_CHECK(it != j.end() && !it->is_null(), "field \"", name, "\" is required");
  return field<T>(j, name, T{});
}

}  // namespace

WireJson sampling_to_json(const engine::SamplingParams& s) {
  WireJson bias = WireJson::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back(WireJson::array({id, b}));
  return WireJson{{"temperature", s.temperature},
                  {"top_p", s.top_p},
                  {"top_k", s.top_k},
                  {"min_p", s.min_p},
                  {"seed", s.seed},
                  {"stream_key", s.stream_key},
                  {"logit_bias", bias},
                  {"presence_penalty", s.presence_penalty},
                  {"frequency_penalty", s.frequency_penalty},
                  {"repetition_penalty", s.repetition_penalty},
                  {"top_logprobs", s.top_logprobs}};
}

engine::SamplingParams sampling_from_json(const WireJson& j) {
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
    for (const auto& pair : *it) {
      DSINFER_CHECK(pair.is_array() && pair.size() == 2 && pair[0].is_number_integer() && pair[1].is_number(),
                          "\"logit_bias\" entries must be [id, bias]");
      s.logit_bias.emplace_back(pair[0].get<int32_t>(), pair[1].get<float>());
    }
  }
  return s;
}

WireJson to_json(const HandoffRequest& r, bool decode) {
  WireJson j{{"transfer", r.transfer},
             {"prompt_ids", r.prompt_ids},
             {"sampling", sampling_to_json(r.sampling)},
             {"stop_token_ids", r.stop_token_ids},
             {"ignore_eos", r.ignore_eos},
             {"max_tokens", r.max_tokens},
             {"traffic_class", r.traffic_class},
             {"output_in_prompt", r.output_in_prompt}};
  if (decode) {
    j["first_token"] = r.first_token;
  } else {
    j["decode_ucx_address"] = r.decode_ucx_address;
  }
  return j;
}

HandoffRequest handoff_request_from_json(const WireJson& j, bool decode) {
  DSINFER_CHECK(j.is_object(), "the body must be a JSON object");
  HandoffRequest r;
  r.transfer = required<uint64_t>(j, "transfer");
  DSINFER_CHECK(r.transfer < kMaxTransferId, "\"transfer\" must be below 2^56");
  r.prompt_ids = required<std::vector<int32_t>>(j, "prompt_ids");
  DSINFER_CHECK(!r.prompt_ids.empty(), "\"prompt_ids\" is empty");
  if (auto it = j.find("sampling"); it != j.end() && !it->is_null()) r.sampling = sampling_from_json(*it);
  r.stop_token_ids = field<std::vector<int32_t>>(j, "stop_token_ids", {});
  r.ignore_eos = field<bool>(j, "ignore_eos", false);
  r.max_tokens = required<int32_t>(j, "max_tokens");
  r.traffic_class = field<std::string>(j, "traffic_class", "default");
  r.output_in_prompt = field<int32_t>(j, "output_in_prompt", 0);
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

WireJson logprobs_to_json(const engine::TokenLogprobs& lp) {
  WireJson top = WireJson::array();
  for (const auto& t : lp.top) top.push_back(WireJson::array({t.token, t.logprob}));
  return WireJson{{"logprob", lp.logprob}, {"top", top}};
}

engine::TokenLogprobs logprobs_from_json(const WireJson& j) {
  engine::TokenLogprobs lp;
  lp.logprob = j.at("logprob").get<float>();
  for (const auto& t : j.at("top")) lp.top.push_back({t.at(0).get<int32_t>(), t.at(1).get<float>()});
  return lp;
}

const char* finish_name(engine::FinishReason f) {
  switch (f) {
    case engine::FinishReason::kNone: return "none";
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kCancelled: return "cancelled";
    case engine::FinishReason::kError: return "error";
  }
  return "error";
}

}  // namespace dsinfer::disagg
