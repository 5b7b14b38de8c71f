// The JSON of the router <-> worker protocol on /internal/v1/ (src/disagg/README.md "Roles and protocol"),
// both directions: for each message one struct, one encoder and one parser, used by the router
// (RemoteEngine) and the prefill/decode workers (disagg::Worker) alike, so the two sides agree by
// construction. Pure functions: every message has a round-trip unit test (tests/router).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace dsinfer::router {

inline constexpr uint64_t kMaxTransferId = uint64_t{1} << 56;  // transfer ids are < 2^56 (UCX frame tags)

// What a request has produced so far (the router's failover bookkeeping): a request that lost its worker
// is re-submitted as prompt + generated, and the workers count `generated` as output (toward max_tokens
// and for penalties) with positions continuing after it.
struct RequestProgress {
  std::vector<int32_t> generated;  // tokens delivered to the client, in order

  // The prompt of the next prefill: the client's prompt followed by what was generated.
  std::vector<int32_t> next_prompt(const std::vector<int32_t>& prompt) const;
};

// POST /internal/v1/prefill, and with first_token, POST /internal/v1/decode.
struct HandoffRequest {
  uint64_t transfer = 0;
  std::vector<int32_t> prompt_ids;
  engine::SamplingParams sampling;  // every field by name; logit_bias as [[id, bias], ...]
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t max_tokens = 256;
  std::string traffic_class = "default";
  // The last output_in_prompt prompt_ids are output the client already has (a stream resumed after its
  // decode worker died): RequestSpec::output_in_prompt, so penalties count them.
  int32_t output_in_prompt = 0;
  // Structured output: the request's TokenConstraint::source() (empty: none). The worker rebuilds the
  // constraint and replays the output it did not sample itself (output_in_prompt, and a decode worker's
  // first_token) before its own first draw.
  std::string constraint;
  std::string decode_ucx_address;  // prefill only: where the state goes
  int32_t first_token = -1;        // decode only
};
// The request a router sends for `spec` after `progress`: prompt + generated, output_in_prompt = the
// generated count, and the request's whole max_tokens.
HandoffRequest handoff_request(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer);
std::string handoff_request_json(const HandoffRequest& r, bool decode);
// Fails with core::Error (invalid input) naming the field that is missing or wrong; missing sampling
// fields keep the engine's defaults.
HandoffRequest parse_handoff_request(std::string_view body, bool decode);
// The engine's spec for it: the prompt and the options (the decode side appends first_token); the
// constraint is the worker's to build.
engine::RequestSpec to_spec(const HandoffRequest& r);

// The prefill worker's answer: the first token, and whether the state went to the decode worker.
struct PrefillReply {
  int32_t first_token = -1;
  engine::FinishReason finish = engine::FinishReason::kNone;  // kNone: the state was handed off
  int32_t matched_stop_token = -1;
  std::optional<engine::TokenLogprobs> logprobs;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t state_bytes = 0;
};
std::string prefill_reply_json(const PrefillReply& r);
PrefillReply parse_prefill_reply(std::string_view body);  // fails with core::Error when malformed

// One line of the decode worker's NDJSON stream: tokens (with their logprobs), or the last line with the
// finish.
struct DecodeLine {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> logprobs;  // empty, or one per token
  bool last = false;
  engine::FinishReason finish = engine::FinishReason::kNone;
  int32_t matched_stop_token = -1;
  std::string error;
};
std::string decode_line_json(const DecodeLine& d);  // with its '\n'
DecodeLine parse_decode_line(std::string_view line);  // fails with core::Error when malformed

// Cuts a byte stream into lines ('\n'; a trailing '\r' is dropped; empty lines are skipped).
class LineSplitter {
 public:
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line);
  bool has_partial() const { return !partial_.empty(); }

 private:
  std::string partial_;
};

engine::FinishReason finish_from_name(std::string_view name);  // fails on an unknown name
const char* finish_name(engine::FinishReason finish);         // "none", "stop", "length", "cancelled", "error"

// POST /internal/v1/workers/heartbeat: a worker's lease, address, capacity and load.
struct Heartbeat {
  std::string id;
  bool prefill = true;  // role
  std::string url;
  std::string ucx_address;
  int64_t max_running = 0, kv_tokens = 0;                // capacity
  int64_t running = 0, waiting = 0, kv_tokens_used = 0;  // load
  int64_t prefill_tokens = 0;  // a prefill worker's: prompt tokens of the prefills it has not answered yet
};
std::string heartbeat_json(const Heartbeat& h);
Heartbeat parse_heartbeat(std::string_view body);  // fails with core::Error when malformed

}  // namespace dsinfer::router
