// The serving engine's public face: submit requests with their own sampling and stop options, receive
// their tokens as they are produced, cancel at any time, read metrics. Protocol-agnostic: the server and the
// offline `generate` command both sit on this. (The lead fixed this contract so the server could be built
// in parallel; extend it, but keep these signatures.)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::engine {

using RequestId = uint64_t;

// Largest SamplingParams::top_logprobs accepted (OpenAI's limit).
inline constexpr int32_t kMaxTopLogprobs = 20;

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int32_t top_k = 0;  // 0 = off
  float min_p = 0.0f;
  uint64_t seed = 0;  // with the request's position: a counter-based stream, independent of batching
  // Mixed into the random stream with the seed. Two requests with the same prompt, seed and key draw
  // the same tokens wherever and whenever they run; give distinct keys for distinct samples.
  uint64_t stream_key = 0;
  // Logit adjustments before the draw (greedy included), in this order: logit_bias adds to the named
  // tokens; repetition_penalty divides positive (multiplies negative) logits of every token in the
  // prompt or the output; frequency_penalty x count and presence_penalty are subtracted for tokens in
  // the output. Each touches one logit at a time, so rows stay batch invariant and deterministic.
  std::vector<std::pair<int32_t, float>> logit_bias;
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f; // (0, 10]; 1 = off
  // -1: off. 0..20: every new token's TokenEvent carries its log-probability and this many alternatives
  // (see TokenLogprobs for what the numbers are).
  int32_t top_logprobs = -1;
  bool adjusts_logits() const {
    return !logit_bias.empty() || presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f;
  }
};

// Structured output: which tokens may come next, for one request (a grammar the server builds through
// grammar/; the engine knows nothing of grammars). The engine sets every other token's logit to -inf
// before sampling and speculative verification, feeds it each token it keeps, and rolls back drafts it
// rejects. Called from engine threads, one call at a time per request.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit t of words[t / 32] set: token t may come next. Never all clear (end of text when nothing else).
  virtual void fill_mask(std::span<uint32_t> words) = 0;
  // Advances past `token`; false, and nothing changes, when it is not allowed.
  virtual bool accept(int32_t token) = 0;
  // Undoes the last n accepted tokens.
  virtual void rollback(int32_t n) = 0;
  // Text another process can rebuild an equal, fresh constraint from (a disaggregated router sends it to
  // its workers, which compile it there); empty: this constraint cannot leave its process.
  virtual std::string source() const { return {}; }
};

struct RequestSpec {
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // in addition to EOS unless ignore_eos
  bool ignore_eos = false;
  // For the KV store's TTLs: "agent" or "chat" (anything else counts as chat).
  std::string traffic_class = "default";
  // Null: any token. It holds the request's matching state: never share one between requests.
  std::shared_ptr<TokenConstraint> constraint;
  // Disaggregated serving (src/disagg/README.md, "Roles and protocol"). A prefill worker's request: it
  // stops after its first token and, when that token does not end it, its final event (finish kLength)
  // carries the sequence's state at the prompt's length in TokenEvent::exported_state
  // (ModelRunner::export_sequence).
  bool export_state = false;
  // A decode worker's request: the state a prefill worker exported, and prompt_ids = the prompt followed
  // by the first token (already delivered by the prefill worker). The engine imports the state instead
  // of prefilling and continues by feeding that token; it counts as generated (max_tokens, frequency and
  // presence penalties), so tokens, logprobs and sampling positions are those of the same request run
  // whole in one engine. Needs max_tokens >= 2.
  std::shared_ptr<const std::vector<uint8_t>> imported_state;
  // A resumed request (a router re-submitting a stream whose decode worker died): the last
  // output_in_prompt ids of prompt_ids (before the first token of an imported request) are output the
  // client already has. They count toward max_tokens and as output for frequency and presence penalties,
  // so the continuation is exactly the uninterrupted run's.
  int32_t output_in_prompt = 0;
};

// A greedy request that ignores EOS, so it produces exactly max_tokens tokens (benchmarks, tests).
inline RequestSpec fixed_length_greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
  RequestSpec s;
  s.prompt_ids = std::move(prompt);
  s.max_tokens = max_tokens;
  s.sampling.temperature = 0;
  s.ignore_eos = true;
  return s;
}

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// Log-probabilities of one new token, from the log-softmax of its row's logits after logit_bias,
// penalties and the structured-output mask, before temperature, top-k, top-p and min-p (OpenAI's
// definition: the numbers do not depend on the sampling knobs). `top` is the row's most likely tokens
// by descending logprob, ties to the lower id; tokens the mask forbids (-inf) are never listed.
struct TokenLogprobs {
  float logprob = 0;  // of the token drawn
  std::vector<TokenLogprob> top;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

struct TokenEvent {
  RequestId id = 0;
  // New tokens since the last event (several with speculation). A stop token (EOS or one of
  // stop_token_ids) is not included: it is reported in matched_stop_token with finish == kStop.
  std::vector<int32_t> tokens;
  // With SamplingParams::top_logprobs >= 0: one entry per element of tokens, in the same order; else empty.
  std::vector<TokenLogprobs> logprobs;
  FinishReason finish = FinishReason::kNone;  // != kNone on the last event of a request
  int32_t matched_stop_token = -1;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache (prompt_cache_hit_tokens)
  std::string error;  // with kError
  // With RequestSpec::export_state, on the final event when the request would go on: the sequence's state.
  std::shared_ptr<const std::vector<uint8_t>> exported_state;
};

// Called on an engine thread; must be quick and must not call back into the engine synchronously
// except cancel() and shutdown() (which then only asks the engine to stop). An exception it throws is
// logged and ignored. The engine drops its copies once the final event has been delivered.
using TokenCallback = std::function<void(const TokenEvent&)>;

enum class SubmitStatus { kAccepted, kQueueFull, kTooLong, kInvalid, kShuttingDown };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kAccepted;
  RequestId id = 0;
  std::string message;  // why, when not accepted
};

struct EngineMetrics {
  int64_t waiting = 0, running = 0, preempted_total = 0;
  int64_t kv_bytes_used = 0, kv_bytes_budget = 0;
  int64_t prompt_tokens_total = 0, cached_tokens_total = 0, generated_tokens_total = 0;
  int64_t steps_total = 0;
  double step_seconds_total = 0;
  int64_t draft_tokens_total = 0, accepted_draft_tokens_total = 0;
  std::map<std::string, double> extra;  // further gauges/counters by name
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual SubmitResult submit(RequestSpec spec, TokenCallback on_event) = 0;  // thread-safe
  virtual void cancel(RequestId id) = 0;  // thread-safe; the request ends with kCancelled, KV freed at once
  virtual EngineMetrics metrics() const = 0;  // thread-safe
  virtual int64_t max_context() const = 0;  // longest prompt + max_tokens accepted
  virtual int32_t eos_token_id() const = 0;
  // Stops admitting; with drain, finishes running requests, else cancels them. Returns when idle,
  // except from a token callback, where it returns at once (the engine then stops by itself; the
  // destructor, which must not run on an engine thread, waits for it).
  virtual void shutdown(bool drain) = 0;
};

class KvConnector;

// How an engine runs. Every field has a safe default; README.md explains the design behind each.
struct EngineOptions {
  // All KV state counts against this: per-sequence window rings and tails, compressed-KV blocks,
  // window snapshots and the prefix cache. When it runs out the cache is evicted, then requests are
  // preempted (and later resumed from the cache or recomputed); the engine never over-allocates.
  int64_t kv_budget_bytes = int64_t{4} << 30;
  int32_t max_batch_tokens = 2048;  // tokens per forward step: prefill chunks + decode + verify rows
  int32_t max_running = 64;         // sequences in the running batch
  int32_t max_queue = 4096;         // waiting requests; beyond it submit() answers kQueueFull

  bool prefix_cache = true;
  int64_t prefix_cache_bytes = -1;  // cap on cached blocks + snapshots; -1: whatever the budget leaves
  // A hit without a window snapshot at its end is resumed by SWA bounded replay (recompute the last
  // window with attention truncated at the replay start; approximate). Off: such hits fall back to
  // the deepest snapshot, or a cold prefill, and every output is exactly a cold run's.
  bool swa_replay = true;
  // Snapshots are kept at the end of each prompt and each finished request; this adds one at every
  // block boundary of the prompt (more exact hits for shared prefixes, more memory).
  bool snapshot_every_block = false;
  // KV outside process memory (kv_connector.h; used only with prefix_cache): every block the engine
  // computes exactly is also saved there, every window snapshot offered, and a new prompt's full blocks
  // that memory lacks are loaded from it before admission (the request waits; others run on). Null:
  // memory only. May be shared by several engines over the same model.
  std::shared_ptr<KvConnector> kv_connector;
  // A request waits at most this long for its blocks; what has not arrived by then is computed.
  int32_t kv_load_timeout_ms = 2000;

  // Decoder-side bounded replay (the CED split, deepinfer-system.md §2.3; 0: off). A prompt longer than
  // K runs the model's decoder layers only on its last K positions, their window attention truncated
  // at the first of them: approximate, and refused by a model without an encoder/decoder split
  // (ModelInfo::supports_decoder_replay). The prompt's last chunk is always that replay (more than K
  // tokens; earlier chunks end at least K + 1 short of the prompt's end, a prefix hit leaves K + 1 to
  // feed), so chunking, cache hits and a recompute after preemption all give the one-pass replay's
  // tokens. A replayed request publishes nothing to the prefix cache or the KV store; requests that
  // export or import their state (disaggregation) run exactly. Needs max_batch_tokens > K.
  int32_t decoder_replay_tokens = 0;

  bool speculation = false;  // MTP drafting + one-step verification (lossless)
  int32_t draft_tokens = 1;  // drafts per step (k), at most the model's max_draft_tokens

  // Plans step n+1 while step n computes; only the bookkeeping that depends on step n's tokens stays
  // between the two forwards.
  bool overlap_scheduling = true;
  // Structured output: each step's token masks are computed on a thread of their own while the
  // forward runs (a mask depends only on the tokens fed and the drafts, all known before the forward);
  // a sampling task whose mask is not ready yet computes it itself. Off: after the forward. The
  // masks, and so the tokens, are the same either way.
  bool overlap_masks = true;
  // A request's tokens do not depend on what else ran in its batch: prefill chunks end on block
  // boundaries whatever the budget left, and the model is asked for batch-invariant kernels.
  bool batch_invariant = true;
  // Random stream keyed by (seed, stream_key, position) only. Off: a per-request nonce is mixed in,
  // so identical unseeded requests sample differently.
  bool deterministic_sampling = true;
};

class ModelRunner;
// The engine over a model (see model_runner.h; open_model() in v4_runner.h loads a checkpoint dir).
std::unique_ptr<Engine> make_engine(std::shared_ptr<ModelRunner> model, const EngineOptions& options);

}  // namespace dsinfer::engine
