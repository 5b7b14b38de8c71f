// The engine's single-threaded state machine: admission, step planning under the token and KV
// budgets, preemption, prefix-cache reuse, applying a step's results and producing events. The
// threads around it (engine_impl.cpp) only decide when each phase runs:
//   plan()    engine bookkeeping only, no model calls; may run while the previous step computes,
//             against the projected state after that step;
//   launch()  the plan's model-side preparation (cancellations, preemptions, new sequences, attach)
//             and the final memory check of every entry;
//   execute() drafting, the forward and sampling; touches only the plan and its sequences;
//   apply()   commits tokens, rolls back rejected drafts, publishes blocks and snapshots, stops.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/helper_thread.h"
#include "engine/kv_connector.h"
#include "engine/model_runner.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"

namespace dsinfer::engine {

struct StepEntry {
  Request* req = nullptr;
  bool prefill = false;
  int64_t start = 0;     // position of the first token fed
  int32_t n_tokens = 0;  // chunk length, or 1 + drafts for a decode/verify entry
  int32_t drafts = 0;
  int32_t decoder_replay = 0;  // ForwardItem::decoder_replay_tokens: K on the request's prompt chunks
  bool samples = false;  // a new token is drawn after this entry
  std::vector<int32_t> tokens;
  std::vector<int32_t> result;  // drawn tokens (accepted drafts + one)
  std::vector<TokenLogprobs> result_logprobs;  // per result token, when the request asked for logprobs
  // With logit adjustments (penalties, bias): the tokens before the first sampled row, and how many of
  // them are the prompt.
  std::vector<int32_t> context;
  int64_t prompt_len = 0;
  int32_t accepted = 0;
};

struct Admission {
  Request* req = nullptr;
  PrefixCache::Match match;  // nodes acquired for the request
  int64_t use_blocks = 0;    // blocks attached
  bool with_snapshot = false;
  int64_t start = 0;         // fed after attach
  bool done = false;         // launch() took it up (started, deferred or failed): abort() leaves it alone
};

struct StepPlan {
  std::vector<StepEntry> entries;
  std::vector<Admission> admissions;
  std::vector<Request*> preemptions;
  std::vector<Request*> failures;  // alone and still out of KV memory
  int64_t tokens = 0;
  double draft_seconds = 0, forward_seconds = 0, sample_seconds = 0;
  // Structured output: the masks' fill time (summed over entries) and how long after the forward the
  // last one was ready; `masked`: the step had constrained entries.
  double mask_seconds = 0, mask_wait_seconds = 0;
  bool masked = false;
  bool launched = false;  // launch() completed; a later plan may already have marked its own victims
  bool empty() const { return entries.empty() && admissions.empty() && preemptions.empty() && failures.empty(); }
};

struct PendingEvent {
  // A copy, or with the final event the request's own callback (moved out), so whatever it holds is
  // released as soon as the event has been delivered.
  TokenCallback callback;
  TokenEvent event;
};

// Blocks answered by the KV connector, handed from its I/O threads to the step loop (drained at the
// start of each plan). Shared with the callbacks, which may outlive the core.
struct KvArrival {
  RequestId id = 0;
  size_t i = 0;                          // index into the request's load
  std::shared_ptr<const KvBlock> block;  // null: a miss
};
struct KvInbox {
  std::mutex mu;
  std::vector<KvArrival> arrivals;
  std::function<void()> wake;  // tells the engine's loop that arrivals are waiting (called under mu)
  int64_t import_failures = 0;
};

// What the exception being handled says (inside a catch block): what() or a stand-in for others.
std::string current_exception_message();

class EngineCore {
 public:
  EngineCore(std::shared_ptr<ModelRunner> model, const EngineOptions& options);
  ~EngineCore();

  const ModelInfo& info() const { return info_; }
  const EngineOptions& options() const { return options_; }

  // Checks a request against the model and the budgets; kAccepted when it can run.
  SubmitResult check(const RequestSpec& spec) const;
  // Strong guarantee: if it throws, nothing changed and `request` still owns the request.
  void add(std::unique_ptr<Request>&& request);
  void cancel(RequestId id);
  void cancel_all();

  bool has_work() const { return !waiting_.empty() || !running_.empty() || !loading_.empty(); }
  // Called when a plan came out empty: with nothing running no later plan can differ, so the request
  // at the head of the queue is failed instead of waiting forever. Returns whether it did so.
  bool resolve_stall();
  size_t waiting() const { return waiting_.size() + loading_.size(); }
  // Run when KV connector answers arrive (from an I/O thread); null to stop.
  void set_kv_wake(std::function<void()> wake);

  // A fault of the model (or std::bad_alloc) ends only the requests it touched, with kError:
  //   plan()    nothing is half done: the partial plan is undone and the exception rethrown;
  //   launch()  a request whose sequence could not be made or attached fails alone; anything else
  //             throws and the caller aborts the step;
  //   execute() throws; the caller aborts the step (every sequence in the forward is suspect);
  //   apply()   a request whose results could not be applied fails alone.
  StepPlan plan();
  void launch(StepPlan& plan);
  void execute(StepPlan& plan);
  void apply(StepPlan& plan);
  void abort(StepPlan& plan, const std::string& why);  // the step failed: its requests end with kError
  // Frees the records of finished requests. Only while no plan refers to them: in launch(), or when
  // no step is planned or in flight.
  void reap();

  std::vector<PendingEvent> take_events();
  EngineMetrics metrics() const;
  std::string debug_string() const;
  void add_gap_seconds(double s) { gap_seconds_ += s; }

 private:
  int64_t blocks_for(int64_t positions) const { return (positions + info_.block_tokens - 1) / info_.block_tokens; }
  int64_t private_bytes(const Request& r, int64_t positions) const;
  int64_t snapshot_charge(const WindowSnapshot& s) const;
  int64_t used_bytes() const { return held_total_ + (cache_ ? cache_->bytes() : 0); }
  // Charges `r` for positions up to `positions`, evicting cached blocks if needed.
  bool reserve(Request& r, int64_t positions);
  void recharge(Request& r);  // after publishing: charge what it holds now
  bool make_room(int64_t bytes);

  int32_t draft_count(const Request& r, int64_t fed) const;
  int64_t chunk_end(const Request& r, int64_t start, int64_t budget, bool alone) const;
  std::optional<Admission> try_admit(Request& r, int64_t budget, bool alone, int64_t& promised, StepEntry& entry);

  // KV connector: start loading the blocks memory lacks (moves `r` to loading_), take the answers in,
  // and admit a request whose answers are all in (or whose wait timed out) with what came.
  void start_load(Request& r);
  void drain_loads();
  void finish_load(Request& r);
  void abandon_load(Request& r);  // finish_load() failed: back to the queue without the store
  // Gives the cache node at block `blocks` of `keys` the pool's snapshot when it has none.
  void adopt_pool_snapshot(const std::vector<uint64_t>& keys, int64_t blocks);
  void save_block(const Request& r, int64_t index, uint64_t key, uint64_t parent, const KvBlock& block);

  void build_plan(StepPlan& plan);
  void undo(StepPlan& plan);  // a plan that will never be launched gives back what it took
  void start_sequence(Admission& a);
  void apply_entry(StepEntry& e);
  void publish(Request& r);
  void take_snapshot(Request& r);
  void release_kv(Request& r);
  void preempt(Request& r);
  void finish(Request& r, FinishReason why, const std::string& error = "");
  void queue_event(Request& r, bool final_event);
  void remove_running(Request* r);
  // Appends one drawn token; returns false when the request stopped.
  // logprobs (may be null) is moved into the request with the token.
  bool push_token(Request& r, int32_t token, TokenLogprobs* logprobs);

  std::shared_ptr<ModelRunner> model_;
  std::unique_ptr<HelperThread> mask_thread_;  // made by the first step with a constraint (overlap_masks)
  // execute()'s logits, kept across steps with room for all its rows (ModelRunner::forward appends to
  // it): at 16 streams of a 129k vocabulary they are 8 MB, which a fresh vector per step mapped, faulted
  // in and copied as the model appended row by row. A capacity over kKeptLogitsFloats (64 MiB) is kept
  // only while steps still need half of it.
  static constexpr size_t kKeptLogitsFloats = size_t{16} << 20;
  std::vector<float> step_logits_;
  ModelInfo info_;
  EngineOptions options_;
  std::unique_ptr<PrefixCache> cache_;

  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;
  std::vector<Request*> running_;  // in admission order
  std::vector<Request*> loading_;  // waiting for the KV connector, in arrival order
  std::shared_ptr<KvConnector> connector_;  // null unless both it and the prefix cache are on
  std::shared_ptr<KvInbox> kv_inbox_;
  std::vector<PendingEvent> events_;
  std::vector<RequestId> finished_;
  uint64_t admit_counter_ = 0;
  int64_t held_total_ = 0;

  // metrics
  int64_t preempted_total_ = 0, prompt_tokens_total_ = 0, cached_tokens_total_ = 0;
  int64_t generated_total_ = 0, steps_total_ = 0, draft_total_ = 0, accepted_total_ = 0;
  int64_t prefill_tokens_total_ = 0, decode_tokens_total_ = 0, replay_hits_ = 0, exact_hits_ = 0;
  int64_t decoder_replays_ = 0;  // prompt chunks the model ran with decoder-side bounded replay
  int64_t finished_total_ = 0, last_batch_tokens_ = 0;
  double step_seconds_ = 0, forward_seconds_ = 0, sample_seconds_ = 0, draft_seconds_ = 0;
  double gap_seconds_ = 0, ttft_seconds_total_ = 0;
  int64_t ttft_count_ = 0;
  double mask_seconds_ = 0, mask_wait_seconds_ = 0;
  int64_t mask_steps_ = 0;
  int64_t kv_loads_ = 0, kv_blocks_asked_ = 0, kv_blocks_hit_ = 0, kv_blocks_imported_ = 0, kv_load_timeouts_ = 0;
  int64_t kv_blocks_saved_ = 0, kv_save_failures_ = 0, kv_pool_snapshots_used_ = 0;
  mutable int64_t kv_metrics_failures_ = 0;  // metrics() runs on the engine thread only
};

}  // namespace dsinfer::engine
