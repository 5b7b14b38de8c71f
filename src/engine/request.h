// The engine's record of one request: its tokens, its place in the schedule, the KV it holds.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/sampler.h"

namespace dsinfer::engine {

using Clock = std::chrono::steady_clock;

struct Request {
  Request(RequestId id_, RequestSpec spec_, TokenCallback cb, TokenStream stream_)
      : id(id_), spec(std::move(spec_)), callback(std::move(cb)), stream(stream_) {}

  RequestId id;
  RequestSpec spec;
  TokenCallback callback;
  TokenStream stream;
  Clock::time_point submitted = Clock::now();

  // Prompt followed by the generated tokens (a stop token is not kept). Once a token has been sampled
  // the last one is "pending": known but not yet fed to the model.
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  int32_t generated = 0;  // tokens produced so far, a stop token included

  // kLoading: waiting for blocks from the KV connector, outside the queue until they are in.
  enum class State { kWaiting, kLoading, kRunning, kFinished } state = State::kWaiting;
  uint64_t admit_order = 0;  // larger = admitted later = first to be preempted

  std::unique_ptr<SequenceState> seq;
  int64_t fed = 0;            // positions the model has processed (seq->length())
  int64_t inflight_end = -1;  // while in an in-flight step: fed after it, at most

  // Prefix cache: chain[i] is the cache node of block i (attached or published), each acquired.
  std::vector<uint64_t> chain;
  bool publish_stopped = false;  // the chain broke (parent evicted): publish nothing more
  std::shared_ptr<const WindowSnapshot> latest_snapshot;  // private, at a block boundary
  int64_t cached_tokens = 0;     // prompt tokens not computed thanks to the cache (first admission)
  bool cache_counted = false;
  bool replayed = false;         // resumed by bounded replay: its blocks only approximate cached twins
  // Decoder-side bounded replay (EngineOptions::decoder_replay_tokens): the request's prompt is fed
  // with it (not when it exports or imports its state); a replay ran, so nothing more is published.
  bool decoder_replay = false;
  bool decoder_replayed = false;

  // KV connector load (state kLoading): blocks load_from .. of the prompt, keyed load_keys[load_from ..].
  std::vector<uint64_t> load_keys;  // chain hashes of the prompt's full blocks (all of them)
  int64_t load_from = 0;
  std::vector<std::shared_ptr<const KvBlock>> loaded;  // per block asked for; null: missed (or not yet)
  std::vector<char> load_answered;
  int64_t load_pending = 0;
  Clock::time_point load_started;

  // KV accounting: bytes charged to this request (sequence state, private blocks, private snapshot)
  // for positions up to `reserved`.
  int64_t reserved = 0;
  int64_t held_bytes = 0;

  // Output not yet delivered.
  std::vector<int32_t> out_tokens;
  std::vector<TokenLogprobs> out_logprobs;  // parallel to out_tokens when spec.sampling.top_logprobs >= 0
  FinishReason finish = FinishReason::kNone;
  int32_t matched_stop = -1;
  std::string error;
  bool cancel_requested = false;
  bool first_token_sent = false;
  bool preempt_pending = false;
  // Disaggregation: the sequence is still to be imported from spec.imported_state (first admission);
  // the state exported after the first token (spec.export_state).
  bool import_pending = false;
  std::shared_ptr<const std::vector<uint8_t>> exported_state;

  // Positions to prefill before decoding: the prompt, or everything but the pending token after a
  // preemption.
  int64_t prefill_target() const {
    return generated > 0 ? static_cast<int64_t>(tokens.size()) - 1 : prompt_len;
  }
  bool in_prefill() const { return fed < prefill_target(); }
};

}  // namespace dsinfer::engine
