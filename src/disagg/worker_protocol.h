// The JSON a router and the prefill/decode workers exchange on /internal/v1/ (README.md "Roles and
// protocol"): one encoder and one parser per message, so both sides agree by construction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace dsinfer::disagg {

using WireJson = nlohmann::ordered_json;

inline constexpr uint64_t kMaxTransferId = uint64_t{1} << 56;  // transfer ids are < 2^56 (frame tags)

// Every SamplingParams field by name; logit_bias as [[id, bias], ...].
WireJson sampling_to_json(const engine::SamplingParams& s);
engine::SamplingParams sampling_from_json(const WireJson& j);  // missing fields keep their defaults

// What the router sends a prefill worker (POST /internal/v1/prefill) and, with first_token, a decode
// worker (POST /internal/v1/decode).
struct HandoffRequest {
  uint64_t transfer = 0;
  std::vector<int32_t> prompt_ids;
  engine::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t max_tokens = 256;
  std::string traffic_class = "default";
  // The last output_in_prompt prompt_ids are output the client already has (a stream resumed after its
  // decode worker died): RequestSpec::output_in_prompt.
  int32_t output_in_prompt = 0;
  std::string decode_ucx_address;  // prefill only: where the state goes
  int32_t first_token = -1;        // decode only
};
WireJson to_json(const HandoffRequest& r, bool decode);
// Throws core::Error (invalid input) naming the field that is missing or wrong.
HandoffRequest handoff_request_from_json(const WireJson& j, bool decode);

// The engine's spec for it: the prompt (+ the first token on the decode side) and the options.
engine::RequestSpec to_spec(const HandoffRequest& r);

WireJson logprobs_to_json(const engine::TokenLogprobs& lp);  // {"logprob": x, "top": [[id, lp], ...]}
engine::TokenLogprobs logprobs_from_json(const WireJson& j);

const char* finish_name(engine::FinishReason f);  // "none", "stop", "length", "cancelled", "error"

}  // namespace dsinfer::disagg
