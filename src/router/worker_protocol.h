// The JSON of the router <-> worker protocol (src/disagg/README.md "Roles and protocol"): what the router
// sends to /internal/v1/prefill and /internal/v1/decode, what it reads back (the prefill reply and the
// decode NDJSON stream), and the heartbeats it receives. Pure functions, so the parsing is unit-tested
// without processes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace dsinfer::router {

// What a request has produced so far (the failover bookkeeping): a request that lost its worker is
// re-submitted as prompt + generated with the budget that is left, and the workers count `generated`
// as output (penalties) with positions continuing after it.
struct RequestProgress {
  std::vector<int32_t> generated;  // tokens delivered to the client, in order

  // The prompt of the next prefill: the client's prompt followed by what was generated.
  std::vector<int32_t> next_prompt(const std::vector<int32_t>& prompt) const;
  // max_tokens for the next prefill/decode: what the request may still produce (>= 1 while not done).
  int32_t remaining(int32_t max_tokens) const;
};

// Body of POST /internal/v1/prefill; the last progress.generated.size() tokens of its prompt_ids are output
// ("generated_before").
std::string prefill_request_json(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer,
                                 const std::string& decode_ucx_address);
// Body of POST /internal/v1/decode: same prompt and options, plus the first token the prefill made.
std::string decode_request_json(const engine::RequestSpec& spec, const RequestProgress& progress, uint64_t transfer,
                                int32_t first_token);

struct PrefillReply {
  int32_t first_token = -1;
  engine::FinishReason finish = engine::FinishReason::kNone;
  int32_t matched_stop_token = -1;
  std::optional<engine::TokenLogprobs> logprobs;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t state_bytes = 0;
};
// Fails with core::Error on a malformed reply.
PrefillReply parse_prefill_reply(std::string_view body);

// One line of the decode stream: tokens (with their logprobs), or the last line with the finish.
struct DecodeLine {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprobs> logprobs;
  bool last = false;
  engine::FinishReason finish = engine::FinishReason::kNone;
  int32_t matched_stop_token = -1;
  std::string error;
};
// Fails with core::Error on a malformed line.
DecodeLine parse_decode_line(std::string_view line);

// Cuts a byte stream into lines ('\n'; a trailing '\r' is dropped; empty lines are skipped).
class LineSplitter {
 public:
  void feed(std::string_view bytes, const std::function<void(std::string_view)>& on_line);
  bool has_partial() const { return !partial_.empty(); }

 private:
  std::string partial_;
};

engine::FinishReason finish_from_name(std::string_view name);  // fails on an unknown name
const char* finish_name(engine::FinishReason finish);

struct Heartbeat {
  std::string id;
  bool prefill = true;  // role
  std::string url;
  std::string ucx_address;
  int64_t max_running = 0, kv_tokens = 0;             // capacity
  int64_t running = 0, waiting = 0, kv_tokens_used = 0;  // load
};
// Fails with core::Error on a malformed heartbeat.
Heartbeat parse_heartbeat(std::string_view body);

}  // namespace dsinfer::router
