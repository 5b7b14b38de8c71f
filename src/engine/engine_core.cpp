#include "engine/engine_core.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"

namespace dsinfer::engine {
namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One sampling entry's structured-output masks: row i is the constraint's mask after drafts 0..i-1.
// A draft the constraint refuses ends them (its row gives it probability 0, so verification rejects
// it and later rows go unused): `rows` rows are filled and `drafts` drafts are in the constraint.
// Filled exactly once, by the mask thread during the forward or by the entry's sampling task.
struct EntryMasks {
  std::vector<uint32_t> words;
  int32_t rows = 0, drafts = 0;
  std::exception_ptr error;
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 filled
  Clock::time_point begin, end;  // of the fill (metrics: mask time, and how long sampling waited for it)
};

void fill_masks(const StepEntry& e, int64_t logit_rows, size_t row_words, EntryMasks& m) {
  try {
    TokenConstraint& c = *e.req->spec.constraint;
    m.words.resize(static_cast<size_t>(logit_rows) * row_words);
    for (int64_t i = 0; i < logit_rows; ++i) {
      c.fill_mask(std::span<uint32_t>(m.words.data() + i * row_words, row_words));
      ++m.rows;
      if (i >= e.drafts || !c.accept(e.tokens[1 + i])) break;
      ++m.drafts;
    }
  } catch (...) {
    m.error = std::current_exception();
  }
}

// Fills `m` unless another thread has claimed it; either way returns once it is filled.
void claim_masks(const StepEntry& e, int64_t logit_rows, size_t row_words, EntryMasks& m, bool wait) {
  int expected = 0;
  if (m.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    m.begin = Clock::now();
    fill_masks(e, logit_rows, row_words, m);
    m.end = Clock::now();
    m.state.store(2, std::memory_order_release);
    m.state.notify_all();
    return;
  }
  if (!wait) return;
  for (int s = m.state.load(std::memory_order_acquire); s != 2; s = m.state.load(std::memory_order_acquire)) {
    m.state.wait(s, std::memory_order_acquire);
  }
}

}  // namespace

std::string current_exception_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

EngineCore::EngineCore(std::shared_ptr<ModelRunner> model, const EngineOptions& options)
    : model_(std::move(model)), options_(options) {
  DSINFER_CHECK(model_ != nullptr, "make_engine: no model");
  info_ = model_->info();
  DSINFER_CHECK(info_.vocab_size > 0 && info_.block_tokens > 0 && info_.max_context > 0,
                "make_engine: the model reports an invalid layout (vocab ", info_.vocab_size, ", block ",
                info_.block_tokens, ", max context ", info_.max_context, ")");
  DSINFER_CHECK(options_.kv_budget_bytes > 0, "EngineOptions.kv_budget_bytes must be positive");
  DSINFER_CHECK(options_.max_batch_tokens >= 1, "EngineOptions.max_batch_tokens must be >= 1");
  DSINFER_CHECK(options_.max_running >= 1, "EngineOptions.max_running must be >= 1");
  DSINFER_CHECK(options_.max_queue >= 1, "EngineOptions.max_queue must be >= 1");
  if (options_.speculation) {
    DSINFER_CHECK(info_.max_draft_tokens > 0, "EngineOptions.speculation: the model has no drafter (MTP)");
    DSINFER_CHECK(options_.draft_tokens >= 1 && options_.draft_tokens <= info_.max_draft_tokens,
                  "EngineOptions.draft_tokens must be in [1, ", info_.max_draft_tokens, "], got ",
                  options_.draft_tokens);
  }
  if (options_.decoder_replay_tokens != 0) {
    const int32_t K = options_.decoder_replay_tokens;
    DSINFER_CHECK(K > 0, "EngineOptions.decoder_replay_tokens (--decoder-replay) must be >= 0, got ", K);
    DSINFER_CHECK(info_.supports_decoder_replay,
                  "decoder-side bounded replay (--decoder-replay) needs a model with an encoder/decoder split "
                  "(DeepseekV41ForCausalLM); this model has none");
    DSINFER_CHECK(options_.max_batch_tokens > K, "decoder-side bounded replay of ", K,
                  " tokens needs max_batch_tokens (--max-batch-tokens) above it: the chunk that ends a prompt holds ",
                  "at least ", int64_t{K} + 1, " tokens, got ", options_.max_batch_tokens);
  }
  model_->prepare(options_.speculation, options_.batch_invariant);
  if (options_.prefix_cache) {
    const int64_t cap = options_.prefix_cache_bytes < 0
                            ? options_.kv_budget_bytes
                            : std::min(options_.prefix_cache_bytes, options_.kv_budget_bytes);
    cache_ = std::make_unique<PrefixCache>(prefix_root_hash(info_.identity, info_.cache_layout), info_.block_tokens,
                                           cap);
    if (options_.kv_connector) {
      connector_ = options_.kv_connector;
      kv_inbox_ = std::make_shared<KvInbox>();
    }
  }
}

EngineCore::~EngineCore() {
  set_kv_wake(nullptr);  // answers still in flight land in the inbox, which they share, and stay there
  // Sequences and cached blocks go back to the model before it may be destroyed.
  for (auto& [id, r] : requests_) r->seq.reset();
  cache_.reset();
}

SubmitResult EngineCore::check(const RequestSpec& spec) const {
  SubmitResult res;
  auto reject = [&](SubmitStatus s, std::string why) {
    res.status = s;
    res.message = std::move(why);
    return res;
  };
  if (spec.prompt_ids.empty()) return reject(SubmitStatus::kInvalid, "prompt_ids is empty");
  for (size_t i = 0; i < spec.prompt_ids.size(); ++i) {
    const int32_t t = spec.prompt_ids[i];
    if (t < 0 || t >= info_.vocab_size) {
      return reject(SubmitStatus::kInvalid, core::str_cat("prompt_ids[", i, "] = ", t, " is outside the vocabulary [0, ",
                                                          info_.vocab_size, ")"));
    }
  }
  if (spec.max_tokens < 1) return reject(SubmitStatus::kInvalid, "max_tokens must be >= 1");
  const bool imported = spec.imported_state != nullptr;
  if (imported) {
    // The last prompt id is the first token, produced by the prefill worker: it counts as output.
    if (spec.prompt_ids.size() < 2) {
      return reject(SubmitStatus::kInvalid, "imported_state: prompt_ids must hold the prompt and the first token");
    }
    if (spec.max_tokens < 2) return reject(SubmitStatus::kInvalid, "imported_state: max_tokens must be >= 2");
    if (spec.export_state) return reject(SubmitStatus::kInvalid, "imported_state and export_state exclude each other");
    if (spec.imported_state->empty()) return reject(SubmitStatus::kInvalid, "imported_state is empty");
  }
  const int64_t earlier_output = spec.output_in_prompt;
  if (earlier_output < 0 || earlier_output + (imported ? 1 : 0) >= static_cast<int64_t>(spec.prompt_ids.size())) {
    return reject(SubmitStatus::kInvalid, "output_in_prompt must leave at least one prompt token");
  }
  if (earlier_output + (imported ? 1 : 0) >= spec.max_tokens) {
    return reject(SubmitStatus::kInvalid, "max_tokens must exceed the output already in the prompt");
  }
  if (std::string why = validate_sampling(spec.sampling); !why.empty()) {
    return reject(SubmitStatus::kInvalid, why);
  }
  for (const auto& [token, bias] : spec.sampling.logit_bias) {
    if (token >= info_.vocab_size) {
      return reject(SubmitStatus::kInvalid, core::str_cat("logit_bias: token ", token, " is outside the vocabulary [0, ",
                                                          info_.vocab_size, ")"));
    }
  }
  const int64_t total =
      static_cast<int64_t>(spec.prompt_ids.size()) - earlier_output - (imported ? 1 : 0) + spec.max_tokens;
  if (total > info_.max_context) {
    return reject(SubmitStatus::kTooLong, core::str_cat("prompt (", spec.prompt_ids.size(), " tokens) + max_tokens (",
                                                        spec.max_tokens, ") exceeds the context limit ",
                                                        info_.max_context));
  }
  const int64_t drafts = options_.speculation ? options_.draft_tokens : 0;
  const int64_t alone = info_.sequence_bytes + blocks_for(total + drafts) * info_.block_bytes + info_.snapshot_bytes;
  if (alone > options_.kv_budget_bytes) {
    return reject(SubmitStatus::kTooLong, core::str_cat("the request needs ", alone, " bytes of KV state, more than the ",
                                                        options_.kv_budget_bytes, "-byte KV budget"));
  }
  return res;
}

void EngineCore::add(std::unique_ptr<Request>&& request) {
  Request& r = *request;
  // If anything here throws (bad_alloc), the core is unchanged and `request` still owns the request.
  r.tokens = r.spec.prompt_ids;
  requests_.reserve(requests_.size() + 1);  // so the emplace below cannot rehash (and throw) after the move
  waiting_.push_back(&r);
  try {
    requests_.emplace(r.id, std::move(request));
  } catch (...) {
    waiting_.pop_back();
    throw;
  }
  // Output already produced elsewhere (a resumed stream, an imported first token) ends the prompt ids:
  // the request continues as if it had drawn those tokens itself, like a preempted one.
  r.generated = r.spec.output_in_prompt;
  if (r.spec.imported_state) {
    r.generated += 1;
    r.import_pending = true;
    r.cache_counted = true;  // nothing computed here was served by the cache either
  }
  r.prompt_len = static_cast<int64_t>(r.tokens.size()) - r.generated;
  prompt_tokens_total_ += r.prompt_len;
  // A state that leaves the engine, or came from one, is exact: the decoder replay's is not exportable,
  // and an imported request recomputed after a preemption must continue the state it was given.
  r.decoder_replay = options_.decoder_replay_tokens > 0 && !r.spec.export_state && !r.spec.imported_state;
  if (connector_) {
    try {
      start_load(r);
    } catch (...) {
      // The request is queued as it is (start_load undid itself): it only loses the store.
      DSINFER_LOG_WARN("engine: request ", r.id, " could not ask the KV store: ", current_exception_message());
    }
  }
}

void EngineCore::set_kv_wake(std::function<void()> wake) {
  if (!kv_inbox_) return;
  std::lock_guard<std::mutex> lock(kv_inbox_->mu);
  kv_inbox_->wake = std::move(wake);
}

// ---- KV connector: loading on admission ------------------------------------------------------

void EngineCore::start_load(Request& r) {
  const int64_t B = info_.block_tokens;
  const int64_t target = r.prefill_target();
  // Blocks that can end a resume: at least one prompt token is left to feed after them.
  const int64_t n = (target - 1) / B;
  if (n <= 0 || r.generated > 0) return;
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  uint64_t parent = cache_->root();
  for (int64_t b = 0; b < n; ++b) {
    parent = keys[b] = chain_hash(parent, std::span<const int32_t>(r.tokens.data() + b * B, B));
  }
  int64_t m = 0;
  while (m < n && cache_->contains(keys[m])) ++m;
  if (m == n) {
    adopt_pool_snapshot(keys, n);
    return;
  }
  std::vector<KvBlockName> names;
  names.reserve(static_cast<size_t>(n - m));
  for (int64_t b = m; b < n; ++b) {
    KvBlockName name;
    name.key = keys[b];
    name.parent = b == 0 ? cache_->root() : keys[b - 1];
    name.index = b;
    name.tokens.assign(r.tokens.begin() + b * B, r.tokens.begin() + (b + 1) * B);
    names.push_back(std::move(name));
  }
  loading_.push_back(&r);
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &r), waiting_.end());
  r.state = Request::State::kLoading;
  r.load_keys = std::move(keys);
  r.load_from = m;
  r.loaded.assign(static_cast<size_t>(n - m), nullptr);
  r.load_answered.assign(static_cast<size_t>(n - m), 0);
  r.load_pending = n - m;
  r.load_started = Clock::now();
  // Importing is the model's pure function of the bytes: it runs on the I/O thread, not the step loop.
  auto done = [inbox = kv_inbox_, model = model_, id = r.id, first = m](size_t i, bool hit,
                                                                      std::span<const uint8_t> payload) {
    std::shared_ptr<const KvBlock> block;
    bool failed = false;
    if (hit) {
      try {
        block = model->import_block(first + static_cast<int64_t>(i), payload);
      } catch (...) {
        failed = true;
        DSINFER_LOG_WARN("engine: a stored KV block could not be imported (a miss): ", current_exception_message());
      }
    }
    std::lock_guard<std::mutex> lock(inbox->mu);
    inbox->arrivals.push_back({id, i, std::move(block)});
    inbox->import_failures += failed;
    if (inbox->wake) inbox->wake();
  };
  try {
    connector_->load(std::move(names), std::move(done));
  } catch (...) {
    loading_.pop_back();
    waiting_.push_back(&r);
    r.state = Request::State::kWaiting;
    r.loaded.clear();
    r.load_answered.clear();
    r.load_keys.clear();
    throw;
  }
  ++kv_loads_;
  kv_blocks_asked_ += n - m;
}

void EngineCore::drain_loads() {
  if (!kv_inbox_) return;
  std::vector<KvArrival> arrivals;
  {
    std::lock_guard<std::mutex> lock(kv_inbox_->mu);
    arrivals.swap(kv_inbox_->arrivals);
  }
  for (KvArrival& a : arrivals) {
    auto it = requests_.find(a.id);
    if (it == requests_.end()) continue;  // finished (cancelled) meanwhile
    Request& r = *it->second;
    if (r.state != Request::State::kLoading || a.i >= r.loaded.size() || r.load_answered[a.i]) continue;
    r.load_answered[a.i] = 1;
    --r.load_pending;
    if (a.block) {
      ++kv_blocks_hit_;
      r.loaded[a.i] = std::move(a.block);
    }
  }
  if (loading_.empty()) return;
  const auto now = Clock::now();
  const auto timeout = std::chrono::milliseconds(options_.kv_load_timeout_ms);
  std::vector<Request*> ready;
  for (Request* r : loading_) {
    // Decided once the run of hits from the first block is known to end (a miss, or all answered).
    bool decided = true;
    for (size_t i = 0; i < r->loaded.size(); ++i) {
      if (!r->load_answered[i]) {
        decided = false;
        break;
      }
      if (!r->loaded[i]) break;
    }
    if (!decided && now - r->load_started >= timeout) {
      ++kv_load_timeouts_;
      decided = true;
    }
    if (decided) ready.push_back(r);
  }
  for (Request* r : ready) {
    try {
      finish_load(*r);
    } catch (...) {
      // The connector's snapshot pool (or memory) failed while the answers joined the cache: the store
      // is a cache, so the request only loses it and is admitted with what memory holds. This runs in
      // plan(), which would otherwise throw the same way on every step and serve nobody again.
      DSINFER_LOG_WARN("engine: request ", r->id, " could not take its loaded KV blocks: ",
                       current_exception_message());
      abandon_load(*r);
    }
  }
}

void EngineCore::abandon_load(Request& r) {
  try {
    waiting_.push_back(&r);
  } catch (...) {
    finish(r, FinishReason::kError,
           core::str_cat("engine: the request could not be queued after its KV load: ", current_exception_message()));
    return;
  }
  // finish_load() can only have thrown before it queued the request (what follows cannot throw).
  loading_.erase(std::remove(loading_.begin(), loading_.end(), &r), loading_.end());
  r.state = Request::State::kWaiting;
  r.loaded.clear();
  r.load_answered.clear();
  r.load_keys.clear();
  r.load_pending = 0;
}

void EngineCore::finish_load(Request& r) {
  const int64_t B = info_.block_tokens;
  // The run of hits from the first missing block joins the cache under the blocks memory held (if they
  // are still there), unreferenced: admission then matches and attaches them like any cached block.
  uint64_t parent = r.load_from == 0 ? cache_->root() : r.load_keys[r.load_from - 1];
  bool chain = r.load_from == 0 || cache_->contains(parent);
  int64_t got = 0;
  for (size_t i = 0; chain && i < r.loaded.size() && r.loaded[i]; ++i) {
    const int64_t b = r.load_from + static_cast<int64_t>(i);
    if (!cache_->contains(r.load_keys[b]) && !make_room(info_.block_bytes)) break;
    auto [node, inserted] = cache_->insert(parent, std::span<const int32_t>(r.tokens.data() + b * B, B),
                                           std::move(r.loaded[i]), info_.block_bytes);
    if (node == 0) break;
    cache_->release(node);
    kv_blocks_imported_ += inserted;
    parent = node;
    ++got;
  }
  adopt_pool_snapshot(r.load_keys, r.load_from + got);
  // Back in the queue in submission order among the new requests (preempted ones stay ahead).
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const Request* w) { return w->generated == 0 && w->id > r.id; });
  waiting_.insert(pos, &r);
  loading_.erase(std::remove(loading_.begin(), loading_.end(), &r), loading_.end());
  r.state = Request::State::kWaiting;
  r.loaded.clear();
  r.load_answered.clear();
  r.load_keys.clear();
  r.load_pending = 0;
}

void EngineCore::adopt_pool_snapshot(const std::vector<uint64_t>& keys, int64_t blocks) {
  if (blocks <= 0) return;
  const uint64_t node = keys[blocks - 1];
  if (!cache_->contains(node) || cache_->has_snapshot(node)) return;
  std::shared_ptr<const WindowSnapshot> snap = connector_->find_snapshot(node);
  if (!snap || snap->position() != blocks * info_.block_tokens) return;
  const int64_t bytes = snapshot_charge(*snap);
  if (!make_room(bytes)) return;
  if (cache_->set_snapshot(node, std::move(snap), bytes)) ++kv_pool_snapshots_used_;
}

void EngineCore::save_block(const Request& r, int64_t index, uint64_t key, uint64_t parent, const KvBlock& block) {
  try {
    std::vector<uint8_t> bytes = model_->export_block(block);
    if (bytes.empty()) return;
    const int64_t B = info_.block_tokens;
    KvBlockName name;
    name.key = key;
    name.parent = parent;
    name.index = index;
    name.tokens.assign(r.tokens.begin() + index * B, r.tokens.begin() + (index + 1) * B);
    connector_->save_block(name, std::move(bytes), r.spec.traffic_class);
    ++kv_blocks_saved_;
  } catch (...) {
    // The store is a cache: a block it misses is computed again later.
    ++kv_save_failures_;
    DSINFER_LOG_WARN("engine: block ", index, " of request ", r.id, " was not saved: ", current_exception_message());
  }
}

void EngineCore::cancel(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  Request& r = *it->second;
  if (r.state == Request::State::kFinished) return;
  if (r.state == Request::State::kRunning) {
    // Its model state goes away in launch() or apply(), on the thread that runs the model.
    r.cancel_requested = true;
    return;
  }
  finish(r, FinishReason::kCancelled);
}

void EngineCore::cancel_all() {
  std::vector<RequestId> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (RequestId id : ids) cancel(id);
}

// ---- KV accounting ------------------------------------------------------------------------------

int64_t EngineCore::snapshot_charge(const WindowSnapshot& s) const {
  // Room is made for the bound before a snapshot is taken; a model that reports more is held to it.
  return std::min(s.bytes(), info_.snapshot_bytes);
}

int64_t EngineCore::private_bytes(const Request& r, int64_t positions) const {
  const int64_t own = std::max<int64_t>(0, blocks_for(positions) - static_cast<int64_t>(r.chain.size()));
  return info_.sequence_bytes + own * info_.block_bytes + (r.latest_snapshot ? snapshot_charge(*r.latest_snapshot) : 0);
}

bool EngineCore::make_room(int64_t bytes) {
  const int64_t over = used_bytes() + bytes - options_.kv_budget_bytes;
  if (over <= 0) return true;
  if (!cache_) return false;
  cache_->evict(over);
  return used_bytes() + bytes <= options_.kv_budget_bytes;
}

bool EngineCore::reserve(Request& r, int64_t positions) {
  positions = std::max(positions, r.fed);
  const int64_t want = private_bytes(r, positions);
  const int64_t delta = want - r.held_bytes;
  if (delta > 0 && !make_room(delta)) return false;
  held_total_ += delta;
  r.held_bytes = want;
  r.reserved = positions;
  return true;
}

void EngineCore::recharge(Request& r) {
  const int64_t want = r.seq ? private_bytes(r, std::max(r.reserved, r.fed)) : 0;
  held_total_ += want - r.held_bytes;
  r.held_bytes = want;
}

// ---- planning -----------------------------------------------------------------------------------

int32_t EngineCore::draft_count(const Request& r, int64_t fed) const {
  // A request that exports its state stops at its first new token: nothing to draft.
  if (!options_.speculation || r.spec.export_state) return 0;
  int64_t k = options_.draft_tokens;
  // This step yields accepted + 1 tokens: no use drafting past max_tokens.
  k = std::min<int64_t>(k, r.spec.max_tokens - std::max(r.generated, 1) - 1);
  // Never verify across a block boundary: the sequence must stop exactly on each boundary so the
  // block can be published and a snapshot taken there.
  if (cache_) {
    const int64_t next_boundary = (fed / info_.block_tokens + 1) * info_.block_tokens;
    k = std::min(k, next_boundary - fed - 1);
  }
  k = std::min(k, info_.max_context - fed - 1);
  return static_cast<int32_t>(std::max<int64_t>(k, 0));
}

int64_t EngineCore::chunk_end(const Request& r, int64_t start, int64_t budget, bool alone) const {
  const int64_t target = r.prefill_target();
  int64_t end = std::min(target, start + budget);
  const int64_t B = info_.block_tokens;
  const int64_t K = r.decoder_replay ? options_.decoder_replay_tokens : 0;
  const int64_t R = r.prompt_len;
  if (K > 0 && start < R - K) {
    // Decoder replay: the chunk that ends the prompt holds more than K tokens, so it is the replay and
    // the state is the one-pass replay's whatever came before it (the encoder side is exact for any
    // chunking); a chunk before it ends K + 1 or more short of the prompt's end. The request publishes
    // nothing, so no snapshot stop. (Chunks past the prompt, a recompute's, never replay: launch().)
    if (end >= R) return R;
    end = std::min(end, R - K - 1);
  } else {
    if (cache_ && r.generated == 0) {
      // Stop on the prompt's snapshot boundary: a repeat of the prompt resumes exactly there.
      const int64_t checkpoint = (target - 1) / B * B;
      if (start < checkpoint && end > checkpoint) return checkpoint;
    }
  }
  if (end == target) return end;
  if (options_.batch_invariant) {
    const int64_t aligned = end / B * B;
    if (aligned > start) return aligned;
    return alone ? end : start;  // a budget below one block: progress beats alignment
  }
  return end;
}

std::optional<Admission> EngineCore::try_admit(Request& r, int64_t budget, bool alone, int64_t& promised,
                                              StepEntry& entry) {
  Admission a;
  a.req = &r;
  if (r.import_pending) {
    // The imported sequence stands before the first token; its first step feeds that token (plus
    // drafts), like a decode step.
    const int64_t at = r.prefill_target();
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(draft_count(r, at), budget - 1));
    const int64_t need = info_.sequence_bytes + blocks_for(at + 1 + k) * info_.block_bytes;
    const int64_t room =
        options_.kv_budget_bytes - used_bytes() + (cache_ ? cache_->evictable_bytes() : 0) - promised;
    if (need > room) return std::nullopt;
    promised += need;
    a.start = at;
    entry.req = &r;
    entry.start = at;
    entry.drafts = k;
    entry.n_tokens = 1 + k;
    entry.samples = true;
    return a;
  }
  const int64_t target = r.prefill_target();
  const int64_t B = info_.block_tokens;
  if (cache_) {
    a.match = cache_->match(std::span<const int32_t>(r.tokens.data(), target), target / B);
    const int64_t matched = static_cast<int64_t>(a.match.nodes.size());
    // Exact resume: the deepest snapshot that still leaves a token to feed (admission starts with a
    // prefill chunk; it also yields the logits of the first token). With decoder replay, K + 1 of the
    // prompt's tokens: its last chunk is the replay, whatever the cache held (chunk_end).
    int64_t limit = target - 1;
    const int64_t K = r.decoder_replay ? options_.decoder_replay_tokens : 0;
    if (K > 0 && r.prompt_len > K) limit = std::min(limit, r.prompt_len - K - 1);
    int64_t exact_blocks = 0;
    for (int64_t b = matched; b >= 1; --b) {
      if (a.match.snapshots[b - 1] && b * B <= limit) {
        exact_blocks = b;
        break;
      }
    }
    // Bounded replay, capped so the last window (plus the rollback depth of speculation) is always
    // computed normally. Never for a preempted request: its continuation must not change.
    int64_t replay_blocks = 0;
    if (options_.swa_replay && info_.supports_replay && r.generated == 0) {
      const int64_t cap = target - (info_.window + (options_.speculation ? options_.draft_tokens : 0));
      replay_blocks = std::min(matched, std::max<int64_t>(cap, 0) / B);
      while (replay_blocks > 0 && replay_blocks * B - std::min<int64_t>(info_.window, replay_blocks * B) > limit) {
        --replay_blocks;
      }
    }
    const int64_t exact_saved = exact_blocks * B;
    const int64_t replay_saved = replay_blocks * B - std::min<int64_t>(info_.window, replay_blocks * B);
    if (replay_saved > exact_saved) {
      a.use_blocks = replay_blocks;
      a.start = replay_saved;
    } else if (exact_blocks > 0) {
      a.use_blocks = exact_blocks;
      a.with_snapshot = true;
      a.start = exact_saved;
    }
    for (int64_t b = 0; b < a.use_blocks; ++b) cache_->acquire(a.match.nodes[b]);
    // Hold no references beyond what is attached: an evicted block must really be freed.
    a.match.nodes.resize(a.use_blocks);
    a.match.blocks.resize(a.use_blocks);
    a.match.snapshots.resize(a.use_blocks);
  }
  auto give_up = [&]() -> std::optional<Admission> {
    for (int64_t b = 0; b < a.use_blocks; ++b) cache_->release(a.match.nodes[b]);
    return std::nullopt;
  };
  const int64_t end = chunk_end(r, a.start, budget, alone);
  if (end <= a.start) return give_up();
  const int64_t need =
      info_.sequence_bytes + std::max<int64_t>(0, blocks_for(end) - a.use_blocks) * info_.block_bytes;
  const int64_t room =
      options_.kv_budget_bytes - used_bytes() + (cache_ ? cache_->evictable_bytes() : 0) - promised;
  if (need > room) return give_up();
  promised += need;
  entry.req = &r;
  entry.prefill = true;
  entry.start = a.start;
  entry.n_tokens = static_cast<int32_t>(end - a.start);
  entry.samples = end == target && r.generated == 0;
  return a;
}

StepPlan EngineCore::plan() {
  drain_loads();
  StepPlan p;
  try {
    build_plan(p);
  } catch (...) {
    undo(p);
    throw;
  }
  return p;
}

void EngineCore::undo(StepPlan& p) {
  for (Request* v : p.preemptions) v->preempt_pending = false;
  for (Request* v : p.failures) v->preempt_pending = false;
  for (auto it = p.admissions.rbegin(); it != p.admissions.rend(); ++it) {
    for (int64_t b = 0; b < it->use_blocks; ++b) cache_->release(it->match.nodes[b]);
    it->match = {};
    it->use_blocks = 0;
    it->done = true;
    waiting_.push_front(it->req);
  }
  p = StepPlan{};
}

void EngineCore::build_plan(StepPlan& p) {
  int64_t budget = options_.max_batch_tokens;
  // Bytes this plan has promised so far, net of what its preemptions will free. The real charge is
  // made in launch(); here the budget is only projected.
  int64_t promised = 0;
  auto room = [&] {
    return options_.kv_budget_bytes - used_bytes() + (cache_ ? cache_->evictable_bytes() : 0) - promised;
  };
  auto projected = [](const Request& r) { return r.inflight_end >= 0 ? r.inflight_end : r.fed; };
  auto in_prefill = [&](const Request& r) { return projected(r) < r.prefill_target(); };
  auto pick_victim = [&](const Request& asking, bool allow_self) -> Request* {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      Request* v = *it;
      if (v->preempt_pending) continue;
      if (v == &asking) return allow_self ? v : nullptr;
      return v;
    }
    return nullptr;
  };
  auto preempt_for = [&](Request& asking, int64_t need, bool allow_self) {
    while (need > room()) {
      Request* v = pick_victim(asking, allow_self);
      if (!v) return false;
      v->preempt_pending = true;
      p.preemptions.push_back(v);
      promised -= v->held_bytes + (cache_ ? cache_->exclusive_bytes(v->chain) : 0);
      for (auto it = p.entries.begin(); it != p.entries.end(); ++it) {
        if (it->req == v) {
          budget += it->n_tokens;
          p.entries.erase(it);
          break;
        }
      }
      if (v == &asking) return false;
    }
    return true;
  };
  int64_t live = 0;
  for (Request* r : running_) {
    if (!r->preempt_pending) ++live;
  }
  bool starved = false;  // a running request wanted memory: admit nobody now

  // 1. Decode (and verify) steps of running requests, oldest first.
  for (Request* r : running_) {
    if (budget <= 0) break;
    if (r->preempt_pending || r->cancel_requested || in_prefill(*r)) continue;
    const int64_t at = projected(*r);
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(draft_count(*r, at), budget - 1));
    const int64_t need = std::max<int64_t>(0, private_bytes(*r, at + 1 + k) - r->held_bytes);
    if (need > room()) {
      starved = true;
      if (live <= 1 && !preempt_for(*r, need, false)) {
        // Alone and still out of memory: check() admitted it, so only the model's own numbers can be
        // wrong here. Fail it rather than loop.
        r->preempt_pending = true;
        p.failures.push_back(r);
        continue;
      }
      if (!preempt_for(*r, need, true)) continue;
    }
    StepEntry e;
    e.req = r;
    e.start = at;
    e.drafts = k;
    e.n_tokens = 1 + k;
    e.samples = true;
    promised += need;
    budget -= e.n_tokens;
    p.entries.push_back(std::move(e));
  }

  // 2. Prefill chunks of running requests, oldest first.
  for (Request* r : running_) {
    if (budget <= 0) break;
    if (r->preempt_pending || r->cancel_requested || !in_prefill(*r)) continue;
    const int64_t start = projected(*r);
    const int64_t end = chunk_end(*r, start, budget, p.entries.empty());
    if (end <= start) continue;
    const int64_t need = std::max<int64_t>(0, private_bytes(*r, end) - r->held_bytes);
    if (need > room()) {
      // Only newer requests give way to an older one's prefill.
      bool newer_exists = false;
      for (Request* v : running_) newer_exists |= !v->preempt_pending && v->admit_order > r->admit_order;
      starved = true;
      if (!newer_exists || !preempt_for(*r, need, false)) continue;
    }
    StepEntry e;
    e.req = r;
    e.prefill = true;
    e.start = start;
    e.n_tokens = static_cast<int32_t>(end - start);
    e.samples = end == r->prefill_target() && r->generated == 0;
    promised += need;
    budget -= e.n_tokens;
    p.entries.push_back(std::move(e));
  }

  // 3. Admissions, first come first served; never by preempting, and not while a running request had
  //    to wait for memory (admitting then would let new arrivals starve it).
  int64_t running_now = 0;
  for (Request* r : running_) running_now += !r->preempt_pending;
  while (!starved && !waiting_.empty() && budget > 0 && running_now < options_.max_running) {
    Request& r = *waiting_.front();
    StepEntry e;
    auto a = try_admit(r, budget, p.entries.empty(), promised, e);
    if (!a) break;
    // Recorded before it leaves the queue, so undo() can put it back.
    try {
      p.admissions.push_back(std::move(*a));
    } catch (...) {
      for (int64_t b = 0; b < a->use_blocks; ++b) cache_->release(a->match.nodes[b]);
      throw;
    }
    waiting_.pop_front();
    budget -= e.n_tokens;
    p.entries.push_back(std::move(e));
    ++running_now;
  }
}

// ---- launch / execute / apply -------------------------------------------------------------------

void EngineCore::launch(StepPlan& p) {
  std::vector<Request*> cancelled;
  for (Request* r : running_) {
    if (r->cancel_requested && r->inflight_end < 0) cancelled.push_back(r);
  }
  for (Request* r : cancelled) finish(*r, FinishReason::kCancelled);
  // A victim left alone by the step that ran meanwhile keeps running: the next plan decides again.
  for (Request* v : p.preemptions) {
    v->preempt_pending = false;
    if (v->state == Request::State::kRunning && running_.size() > 1) preempt(*v);
  }
  for (Request* v : p.failures) {
    v->preempt_pending = false;
    if (v->state != Request::State::kRunning || running_.size() > 1 || v->inflight_end >= 0) continue;
    if (reserve(*v, v->fed + 1)) continue;
    finish(*v, FinishReason::kError,
           core::str_cat("out of KV memory: the request alone needs more than the ", options_.kv_budget_bytes,
                         "-byte budget"));
  }
  for (Admission& a : p.admissions) {
    Request& r = *a.req;
    a.done = true;
    if (!make_room(info_.sequence_bytes)) {
      // The step that ran while this was planned used the room: wait for the next plan.
      for (int64_t b = 0; b < a.use_blocks; ++b) cache_->release(a.match.nodes[b]);
      a.match = {};
      waiting_.push_front(&r);
      continue;
    }
    try {
      start_sequence(a);
    } catch (...) {
      // Only this request's sequence is in doubt: it fails alone, the step goes on without it.
      const std::string why = current_exception_message();
      DSINFER_LOG_ERROR("engine: request ", r.id, " could not start its sequence: ", why);
      r.seq.reset();
      r.fed = 0;
      for (int64_t b = 0; b < a.use_blocks; ++b) cache_->release(a.match.nodes[b]);
      a.match = {};
      finish(r, FinishReason::kError, core::str_cat("engine: the model failed to start the sequence: ", why));
      continue;
    }
    r.chain.assign(a.match.nodes.begin(), a.match.nodes.begin() + a.use_blocks);
    a.match = {};
    if (a.use_blocks > 0) ++(a.with_snapshot ? exact_hits_ : replay_hits_);
    r.replayed = r.replayed || (a.use_blocks > 0 && !a.with_snapshot);  // sticky: its later blocks inherit it
    if (!r.cache_counted) {
      r.cached_tokens = r.fed;
      cached_tokens_total_ += r.fed;
      r.cache_counted = true;
    }
    r.state = Request::State::kRunning;
    r.admit_order = ++admit_counter_;
    r.reserved = r.fed;
    r.held_bytes = 0;
    recharge(r);
    running_.push_back(&r);
  }
  std::vector<StepEntry> kept;
  kept.reserve(p.entries.size());
  p.tokens = 0;
  for (StepEntry& e : p.entries) {
    Request& r = *e.req;
    if (r.state != Request::State::kRunning || r.cancel_requested || r.preempt_pending) continue;
    if (e.prefill) {
      const int64_t end = e.start + e.n_tokens;
      e.start = r.fed;
      if (end <= e.start) continue;
      e.n_tokens = static_cast<int32_t>(end - e.start);
      e.samples = end == r.prefill_target() && r.generated == 0;
      // Only the prompt replays: a chunk past it (a recompute after preemption) runs every layer.
      e.decoder_replay = r.decoder_replay && end <= r.prompt_len ? options_.decoder_replay_tokens : 0;
      e.tokens.assign(r.tokens.begin() + e.start, r.tokens.begin() + end);
      if (e.samples && r.spec.sampling.adjusts_logits()) e.context.assign(r.tokens.begin(), r.tokens.begin() + end);
    } else {
      if (r.in_prefill()) continue;
      DSINFER_CHECK(static_cast<int64_t>(r.tokens.size()) == r.fed + 1, "engine: request ", r.id,
                    " has no pending token to decode");
      e.start = r.fed;
      e.drafts = std::min(e.drafts, draft_count(r, r.fed));
      e.n_tokens = 1 + e.drafts;
      e.tokens.assign(e.n_tokens, 0);
      e.tokens[0] = r.tokens[r.fed];
      if (r.spec.sampling.adjusts_logits()) e.context.assign(r.tokens.begin(), r.tokens.begin() + r.fed + 1);
    }
    e.prompt_len = r.prompt_len;
    if (!reserve(r, e.start + e.n_tokens)) continue;  // the next plan preempts for it
    r.inflight_end = e.start + e.n_tokens;
    p.tokens += e.n_tokens;
    kept.push_back(std::move(e));
  }
  p.entries = std::move(kept);
  p.launched = true;
  reap();
}

void EngineCore::start_sequence(Admission& a) {
  Request& r = *a.req;
  if (r.import_pending) {
    r.seq = model_->import_sequence(*r.spec.imported_state);
    DSINFER_CHECK(r.seq != nullptr, "the model cannot import sequences (imported_state)");
    DSINFER_CHECK(r.seq->length() == r.prefill_target(), "the imported sequence has ", r.seq->length(),
                  " positions, the request ", r.prefill_target(), " before its pending token");
    // Once imported the bytes are not needed again: a preempted request is recomputed from its tokens.
    r.import_pending = false;
    r.spec.imported_state.reset();
    r.fed = r.seq->length();
    return;
  }
  std::vector<std::shared_ptr<const KvBlock>> blocks(a.match.blocks.begin(), a.match.blocks.begin() + a.use_blocks);
  r.seq = model_->new_sequence();
  if (a.use_blocks > 0) {
    model_->attach(*r.seq, blocks, a.with_snapshot ? a.match.snapshots[a.use_blocks - 1].get() : nullptr);
  }
  r.fed = r.seq->length();
  DSINFER_CHECK(r.fed == a.start, "model attach left the sequence at ", r.fed, ", expected ", a.start);
}

void EngineCore::reap() {
  for (RequestId id : finished_) requests_.erase(id);
  finished_.clear();
}

void EngineCore::execute(StepPlan& p) {
  if (p.entries.empty()) return;
  auto t0 = Clock::now();
  std::vector<DraftItem> drafts;
  std::vector<StepEntry*> drafting;
  for (StepEntry& e : p.entries) {
    if (e.drafts > 0) {
      drafts.push_back({e.req->seq.get(), e.tokens[0], e.drafts});
      drafting.push_back(&e);
    }
  }
  if (!drafts.empty()) {
    std::vector<int32_t> proposed = model_->draft(drafts);
    size_t want = 0;
    for (const DraftItem& d : drafts) want += d.count;
    DSINFER_CHECK(proposed.size() == want, "model draft returned ", proposed.size(), " tokens, expected ", want);
    size_t at = 0;
    for (StepEntry* e : drafting) {
      for (int32_t i = 0; i < e->drafts; ++i) {
        const int32_t t = proposed[at++];
        DSINFER_CHECK(t >= 0 && t < info_.vocab_size, "model drafted token ", t, " outside the vocabulary");
        e->tokens[1 + i] = t;
      }
    }
  }
  auto t1 = Clock::now();
  std::vector<ForwardItem> items;
  items.reserve(p.entries.size());
  std::vector<int64_t> row_of(p.entries.size(), -1);
  int64_t rows = 0;
  for (size_t i = 0; i < p.entries.size(); ++i) {
    StepEntry& e = p.entries[i];
    ForwardItem item;
    item.seq = e.req->seq.get();
    item.tokens = e.tokens;
    item.logit_rows = e.samples ? (e.prefill ? 1 : 1 + e.drafts) : 0;
    item.decoder_replay_tokens = e.decoder_replay;
    if (item.logit_rows > 0) row_of[i] = rows;
    rows += item.logit_rows;
    items.push_back(item);
  }
  // Structured output: a mask depends only on the tokens fed so far and this step's drafts, so the
  // masks are filled on the mask thread while the forward runs (xgrammar's overlap); the sampling
  // tasks take them, filling any the thread has not reached.
  const int64_t V = info_.vocab_size;
  const size_t row_words = static_cast<size_t>((V + 31) / 32);
  std::vector<EntryMasks> masks(p.entries.size());
  bool constrained = false;
  for (size_t i = 0; i < p.entries.size(); ++i) {
    constrained |= items[i].logit_rows > 0 && p.entries[i].req->spec.constraint;
  }
  struct JoinOnExit {
    HelperThread* thread = nullptr;
    ~JoinOnExit() {
      if (thread != nullptr) thread->wait();  // the job reads this frame: never unwind past it
    }
  } mask_job;
  if (constrained && options_.overlap_masks) {
    if (!mask_thread_) mask_thread_ = std::make_unique<HelperThread>();
    mask_job.thread = mask_thread_.get();
    mask_thread_->start([&] {
      for (size_t i = 0; i < p.entries.size(); ++i) {
        if (items[i].logit_rows > 0 && p.entries[i].req->spec.constraint) {
          claim_masks(p.entries[i], items[i].logit_rows, row_words, masks[i], false);
        }
      }
    });
  }
  // Kept across steps (see step_logits_); given back when one step needed far more.
  std::vector<float>& logits = step_logits_;
  if (logits.capacity() > kKeptLogitsFloats && logits.capacity() > 2 * static_cast<size_t>(rows * V)) {
    std::vector<float>().swap(logits);
  }
  logits.clear();
  logits.reserve(static_cast<size_t>(rows * V));
  model_->forward(items, logits);
  DSINFER_CHECK(static_cast<int64_t>(logits.size()) == rows * info_.vocab_size, "model forward returned ",
                logits.size(), " logits, expected ", rows, " rows of ", info_.vocab_size);
  auto t2 = Clock::now();
  std::vector<size_t> sampling;
  for (size_t i = 0; i < p.entries.size(); ++i) {
    if (row_of[i] >= 0) sampling.push_back(i);
  }
  model_->pool().run(static_cast<int64_t>(sampling.size()), [&](int64_t task, int) {
    StepEntry& e = p.entries[sampling[task]];
    const Request& r = *e.req;
    std::span<const float> all(logits.data() + row_of[sampling[task]] * V,
                               static_cast<size_t>(items[sampling[task]].logit_rows * V));
    std::vector<float> adjusted;
    if (r.spec.sampling.adjusts_logits()) {
      // Row i follows the context and drafts 0..i-1 (the plan copied the context: the request's own
      // tokens may change on the scheduler thread meanwhile).
      adjusted.assign(all.begin(), all.end());
      std::vector<int32_t> context = e.context;
      for (int64_t i = 0; i < items[sampling[task]].logit_rows; ++i) {
        adjust_logits(std::span<float>(adjusted.data() + i * V, static_cast<size_t>(V)), r.spec.sampling, context,
                      e.prompt_len);
        if (i < e.drafts) context.push_back(e.tokens[1 + i]);
      }
      all = adjusted;
    }
    // Structured output: the rows EntryMasks filled are masked; its drafts are in the constraint.
    TokenConstraint* constraint = r.spec.constraint.get();
    int32_t constrained_drafts = 0;
    if (constraint != nullptr) {
      EntryMasks& m = masks[sampling[task]];
      claim_masks(e, items[sampling[task]].logit_rows, row_words, m, true);
      if (m.error) std::rethrow_exception(m.error);
      if (adjusted.empty()) adjusted.assign(all.begin(), all.end());
      for (int32_t i = 0; i < m.rows; ++i) {
        apply_token_mask(std::span<float>(adjusted.data() + i * V, static_cast<size_t>(V)),
                         std::span<const uint32_t>(m.words.data() + i * row_words, row_words));
      }
      constrained_drafts = m.drafts;
      all = adjusted;
    }
    if (e.drafts > 0) {
      Verification v = verify_drafts(all, static_cast<int32_t>(V),
                                     std::span<const int32_t>(e.tokens.data() + 1, e.drafts), {}, r.spec.sampling,
                                     r.stream, e.start + 1);
      e.result = std::move(v.tokens);
      e.accepted = v.accepted;
    } else {
      e.result = {sample_token(all, r.spec.sampling, r.stream, e.start + e.n_tokens)};
      e.accepted = 0;
    }
    // Result token i was drawn from row i (an accepted or corrected draft's row, or the bonus row).
    e.result_logprobs.clear();
    if (r.spec.sampling.top_logprobs >= 0) {
      for (size_t i = 0; i < e.result.size(); ++i) {
        e.result_logprobs.push_back(token_logprobs(all.subspan(i * V, static_cast<size_t>(V)), e.result[i],
                                                   r.spec.sampling.top_logprobs));
      }
    }
    if (constraint != nullptr) {
      DSINFER_CHECK_INTERNAL(e.accepted <= constrained_drafts, "engine: a draft outside the constraint was accepted");
      constraint->rollback(constrained_drafts - e.accepted);
      // The accepted drafts are in the constraint already; the new token joins them unless a stop token
      // among the drafts ends the request first (what follows it was drawn past the end).
      bool stopped = false;
      for (int32_t i = 0; i < e.accepted; ++i) {
        const int32_t t = e.result[i];
        stopped = stopped || (!r.spec.ignore_eos && t == info_.eos_token_id) ||
                  std::find(r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end(), t) != r.spec.stop_token_ids.end();
      }
      DSINFER_CHECK_INTERNAL(stopped || constraint->accept(e.result.back()), "engine: sampled token ",
                             e.result.back(), " outside the constraint's mask");
    }
  });
  auto t3 = Clock::now();
  // Mask metrics: the fills' time, and how long past the forward the last mask came (what the overlap
  // did not hide; without it, the whole mask time).
  if (constrained) {
    Clock::time_point last = t2;
    for (const EntryMasks& m : masks) {
      if (m.state.load(std::memory_order_acquire) != 2) continue;
      p.mask_seconds += std::chrono::duration<double>(m.end - m.begin).count();
      last = std::max(last, m.end);
    }
    p.mask_wait_seconds = std::chrono::duration<double>(last - t2).count();
    p.masked = true;
  }
  p.draft_seconds = std::chrono::duration<double>(t1 - t0).count();
  p.forward_seconds = std::chrono::duration<double>(t2 - t1).count();
  p.sample_seconds = std::chrono::duration<double>(t3 - t2).count();
}

bool EngineCore::resolve_stall() {
  if (!running_.empty() || waiting_.empty()) return false;
  Request& r = *waiting_.front();
  DSINFER_LOG_ERROR("engine: request ", r.id, " cannot be scheduled (KV budget ", options_.kv_budget_bytes,
                    " bytes, ", used_bytes(), " in use)");
  finish(r, FinishReason::kError,
         core::str_cat("the engine could not schedule the request within its KV budget of ", options_.kv_budget_bytes,
                       " bytes"));
  reap();
  return true;
}

void EngineCore::abort(StepPlan& p, const std::string& why) {
  if (!p.launched) {
    for (Request* v : p.preemptions) v->preempt_pending = false;
    for (Request* v : p.failures) v->preempt_pending = false;
  }
  for (Admission& a : p.admissions) {
    if (a.done) continue;
    a.done = true;
    for (int64_t b = 0; b < a.use_blocks; ++b) cache_->release(a.match.nodes[b]);
    a.match = {};
    finish(*a.req, FinishReason::kError, why);
  }
  for (StepEntry& e : p.entries) {
    e.req->inflight_end = -1;
    finish(*e.req, FinishReason::kError, why);
  }
}

bool EngineCore::push_token(Request& r, int32_t token, TokenLogprobs* logprobs) {
  ++r.generated;
  ++generated_total_;
  const bool stop = (!r.spec.ignore_eos && token == info_.eos_token_id) ||
                    std::find(r.spec.stop_token_ids.begin(), r.spec.stop_token_ids.end(), token) !=
                        r.spec.stop_token_ids.end();
  if (stop) {
    r.matched_stop = token;
    r.finish = FinishReason::kStop;
    return false;
  }
  r.tokens.push_back(token);
  r.out_tokens.push_back(token);
  if (logprobs != nullptr) r.out_logprobs.push_back(std::move(*logprobs));
  if (r.generated >= r.spec.max_tokens || static_cast<int64_t>(r.tokens.size()) >= info_.max_context) {
    r.finish = FinishReason::kLength;
    return false;
  }
  return true;
}

void EngineCore::apply(StepPlan& p) {
  ++steps_total_;
  last_batch_tokens_ = p.tokens;
  step_seconds_ += p.draft_seconds + p.forward_seconds + p.sample_seconds;
  forward_seconds_ += p.forward_seconds;
  sample_seconds_ += p.sample_seconds;
  draft_seconds_ += p.draft_seconds;
  mask_seconds_ += p.mask_seconds;
  mask_wait_seconds_ += p.mask_wait_seconds;
  mask_steps_ += p.masked ? 1 : 0;
  for (StepEntry& e : p.entries) {
    e.req->inflight_end = -1;
    try {
      apply_entry(e);
    } catch (...) {
      // The model failed on this sequence (rollback, block, snapshot): it alone ends.
      const std::string why = current_exception_message();
      DSINFER_LOG_ERROR("engine: request ", e.req->id, " failed after its step: ", why);
      finish(*e.req, FinishReason::kError, core::str_cat("engine: the model failed after a step: ", why));
    }
  }
}

void EngineCore::apply_entry(StepEntry& e) {
  Request& r = *e.req;
  r.fed = e.start + e.n_tokens;
  if (e.prefill) {
    prefill_tokens_total_ += e.n_tokens;
    // The model replayed this chunk: the sequence's blocks are approximate from here on.
    if (e.decoder_replay > 0 && e.n_tokens > e.decoder_replay) {
      r.decoder_replayed = true;
      ++decoder_replays_;
    }
  } else {
    decode_tokens_total_ += e.n_tokens;
    draft_total_ += e.drafts;
    accepted_total_ += e.accepted;
    if (e.accepted < e.drafts) {
      r.fed = e.start + 1 + e.accepted;
      model_->truncate(*r.seq, r.fed);
    }
  }
  r.reserved = r.fed;
  if (r.cancel_requested) {
    finish(r, FinishReason::kCancelled);
    return;
  }
  // Accepted drafts join the tokens first: the blocks they complete are published with them.
  if (e.samples) {
    for (size_t i = 0; i < e.result.size(); ++i) {
      if (!push_token(r, e.result[i], i < e.result_logprobs.size() ? &e.result_logprobs[i] : nullptr)) break;
    }
  }
  publish(r);
  take_snapshot(r);
  recharge(r);
  if (e.samples && r.spec.export_state && r.finish == FinishReason::kNone) {
    // A prefill worker's request ends here; its state goes to the decode worker.
    std::vector<uint8_t> bytes = model_->export_sequence(*r.seq);
    DSINFER_CHECK(!bytes.empty(), "the model cannot export sequences (export_state)");
    r.exported_state = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    r.finish = FinishReason::kLength;
  }
  if (r.finish != FinishReason::kNone) {
    finish(r, r.finish);
  } else if (!r.out_tokens.empty()) {
    queue_event(r, false);
  }
}

// ---- prefix cache publication -------------------------------------------------------------------

void EngineCore::publish(Request& r) {
  // After a decoder replay the model exports nothing (its blocks are approximate): neither the prefix
  // cache nor the KV store may take them for exact.
  if (!cache_ || r.publish_stopped || r.decoder_replayed || !r.seq) return;
  const int64_t B = info_.block_tokens;
  // A stop token fed as an accepted draft is not part of the sequence: publish only what is.
  const int64_t complete = std::min<int64_t>(r.fed, static_cast<int64_t>(r.tokens.size())) / B;
  while (static_cast<int64_t>(r.chain.size()) < complete) {
    const int64_t b = static_cast<int64_t>(r.chain.size());
    const uint64_t parent = b == 0 ? cache_->root() : r.chain.back();
    std::shared_ptr<const KvBlock> block = model_->block(*r.seq, b);
    auto [node, inserted] =
        cache_->insert(parent, std::span<const int32_t>(r.tokens.data() + b * B, B), block, info_.block_bytes);
    if (node == 0) {
      r.publish_stopped = true;
      break;
    }
    // After a bounded replay the sequence's own block only approximates the cached twin: it is not
    // interchangeable with it (and a KV store hit makes that case common: the blocks past the replay are
    // cached too).
    if (!inserted && (r.replayed || !model_->adopt_block(*r.seq, b, cache_->block(node)))) {
      // Holding the twin would pin two copies of one block: let it go and publish nothing more.
      cache_->release(node);
      r.publish_stopped = true;
      break;
    }
    r.chain.push_back(node);
    // Like the memory cache, the store gets blocks computed after a bounded replay too (they carry its
    // approximation; swa_replay = false keeps every block exact): a long shared system prompt would
    // otherwise keep every conversation behind it out of the store.
    if (inserted && connector_) save_block(r, b, node, parent, *block);
  }
  recharge(r);
}

void EngineCore::take_snapshot(Request& r) {
  const int64_t B = info_.block_tokens;
  if (!cache_ || !r.seq || r.fed == 0 || r.fed % B != 0) return;
  const int64_t blocks = r.fed / B;
  if (static_cast<int64_t>(r.chain.size()) < blocks) return;  // not published: nothing to attach it to
  const uint64_t node = r.chain[blocks - 1];
  if (cache_->has_snapshot(node)) {
    r.latest_snapshot.reset();
    recharge(r);
    return;
  }
  // Snapshot positions kept in the cache at once: the prompt's last boundaries (a repeat of the prompt
  // resumes at (P-1) div B, a continuation at P div B), or every boundary on request. Others are kept
  // privately and published when the request ends or is preempted.
  const int64_t P = r.prompt_len;
  const bool checkpoint = options_.snapshot_every_block ? r.fed <= P : (r.fed >= (P - 1) / B * B && r.fed <= P);
  // The older private snapshot goes first; the new one is taken only once its bytes are free.
  r.latest_snapshot.reset();
  recharge(r);
  if (!make_room(info_.snapshot_bytes)) return;
  std::shared_ptr<const WindowSnapshot> snap = model_->snapshot(*r.seq);
  if (connector_) {
    try {
      connector_->save_snapshot(node, snap);
    } catch (...) {
      DSINFER_LOG_WARN("engine: a window snapshot was not pooled: ", current_exception_message());
    }
  }
  if (checkpoint) {
    const int64_t bytes = snapshot_charge(*snap);
    cache_->set_snapshot(node, std::move(snap), bytes);
  } else {
    r.latest_snapshot = std::move(snap);
    recharge(r);
  }
}

void EngineCore::release_kv(Request& r) {
  if (cache_ && r.latest_snapshot) {
    const int64_t blocks = r.latest_snapshot->position() / info_.block_tokens;
    if (blocks >= 1 && static_cast<int64_t>(r.chain.size()) >= blocks) {
      cache_->set_snapshot(r.chain[blocks - 1], r.latest_snapshot, snapshot_charge(*r.latest_snapshot));
    }
  }
  r.latest_snapshot.reset();
  r.seq.reset();
  held_total_ -= r.held_bytes;
  r.held_bytes = 0;
  r.reserved = 0;
  if (cache_) {
    for (uint64_t node : r.chain) cache_->release(node);
  }
  r.chain.clear();
  r.publish_stopped = false;
  r.fed = 0;
  r.inflight_end = -1;
}

void EngineCore::remove_running(Request* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
}

void EngineCore::preempt(Request& r) {
  release_kv(r);
  remove_running(&r);
  r.state = Request::State::kWaiting;
  waiting_.push_front(&r);
  ++preempted_total_;
}

void EngineCore::finish(Request& r, FinishReason why, const std::string& error) {
  if (r.state == Request::State::kFinished) return;
  r.finish = why;
  r.error = error;
  if (r.state == Request::State::kRunning) {
    release_kv(r);
    remove_running(&r);
  } else if (r.state == Request::State::kLoading) {
    // Answers still on their way are dropped when they arrive.
    loading_.erase(std::remove(loading_.begin(), loading_.end(), &r), loading_.end());
    r.loaded.clear();
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), &r), waiting_.end());
  }
  r.state = Request::State::kFinished;
  ++finished_total_;
  queue_event(r, true);
  finished_.push_back(r.id);
}

void EngineCore::queue_event(Request& r, bool final_event) {
  PendingEvent pe;
  if (final_event) {
    pe.callback = std::move(r.callback);
    r.callback = nullptr;
  } else {
    pe.callback = r.callback;
  }
  TokenEvent& ev = pe.event;
  ev.id = r.id;
  ev.tokens = std::move(r.out_tokens);
  r.out_tokens.clear();
  ev.logprobs = std::move(r.out_logprobs);
  r.out_logprobs.clear();
  ev.finish = final_event ? r.finish : FinishReason::kNone;
  ev.matched_stop_token = final_event ? r.matched_stop : -1;
  ev.prompt_tokens = r.prompt_len;
  ev.cached_tokens = r.cached_tokens;
  ev.error = r.error;
  if (final_event) ev.exported_state = std::move(r.exported_state);
  if (!r.first_token_sent && (!ev.tokens.empty() || final_event)) {
    r.first_token_sent = true;
    ttft_seconds_total_ += seconds_since(r.submitted);
    ++ttft_count_;
  }
  events_.push_back(std::move(pe));
}

std::vector<PendingEvent> EngineCore::take_events() {
  std::vector<PendingEvent> out;
  out.swap(events_);
  return out;
}

std::string EngineCore::debug_string() const {
  std::string out;
  for (const Request* r : running_) {
    out += core::str_cat("req ", r->id, " fed ", r->fed, " reserved ", r->reserved, " chain ", r->chain.size(),
                         " held ", r->held_bytes, " snap ", r->latest_snapshot != nullptr,
                         " stopped ", r->publish_stopped, "\n");
  }
  out += core::str_cat("held_total ", held_total_, " cache ", cache_ ? cache_->bytes() : 0, "\n");
  return out;
}

EngineMetrics EngineCore::metrics() const {
  EngineMetrics m;
  m.waiting = static_cast<int64_t>(waiting_.size());
  m.running = static_cast<int64_t>(running_.size());
  m.preempted_total = preempted_total_;
  m.kv_bytes_used = used_bytes();
  m.kv_bytes_budget = options_.kv_budget_bytes;
  m.prompt_tokens_total = prompt_tokens_total_;
  m.cached_tokens_total = cached_tokens_total_;
  m.generated_tokens_total = generated_total_;
  m.steps_total = steps_total_;
  m.step_seconds_total = step_seconds_;
  m.draft_tokens_total = draft_total_;
  m.accepted_draft_tokens_total = accepted_total_;
  int64_t prefilling = 0;
  for (const Request* r : running_) prefilling += r->in_prefill();
  m.extra["running_prefill"] = static_cast<double>(prefilling);
  m.extra["running_decode"] = static_cast<double>(m.running - prefilling);
  m.extra["finished_total"] = static_cast<double>(finished_total_);
  m.extra["prefill_tokens_total"] = static_cast<double>(prefill_tokens_total_);
  m.extra["decode_tokens_total"] = static_cast<double>(decode_tokens_total_);
  m.extra["last_batch_tokens"] = static_cast<double>(last_batch_tokens_);
  m.extra["forward_seconds_total"] = forward_seconds_;
  m.extra["sample_seconds_total"] = sample_seconds_;
  m.extra["draft_seconds_total"] = draft_seconds_;
  m.extra["schedule_gap_seconds_total"] = gap_seconds_;
  m.extra["mask_seconds_total"] = mask_seconds_;
  m.extra["mask_wait_seconds_total"] = mask_wait_seconds_;
  m.extra["mask_steps_total"] = static_cast<double>(mask_steps_);
  m.extra["ttft_seconds_total"] = ttft_seconds_total_;
  m.extra["ttft_count"] = static_cast<double>(ttft_count_);
  m.extra["kv_bytes_sequences"] = static_cast<double>(held_total_);
  m.extra["prefix_cache_exact_hits_total"] = static_cast<double>(exact_hits_);
  m.extra["prefix_cache_replay_hits_total"] = static_cast<double>(replay_hits_);
  m.extra["decoder_replays_total"] = static_cast<double>(decoder_replays_);
  if (cache_) {
    m.extra["prefix_cache_bytes"] = static_cast<double>(cache_->bytes());
    m.extra["prefix_cache_blocks"] = static_cast<double>(cache_->nodes());
    m.extra["prefix_cache_snapshots"] = static_cast<double>(cache_->snapshots());
    m.extra["prefix_cache_evicted_blocks_total"] = static_cast<double>(cache_->evicted_blocks_total());
  }
  if (connector_) {
    m.extra["kv_loading"] = static_cast<double>(loading_.size());
    m.extra["kv_store_request_loads_total"] = static_cast<double>(kv_loads_);
    m.extra["kv_store_blocks_asked_total"] = static_cast<double>(kv_blocks_asked_);
    m.extra["kv_store_blocks_loaded_total"] = static_cast<double>(kv_blocks_hit_);
    m.extra["kv_store_blocks_imported_total"] = static_cast<double>(kv_blocks_imported_);
    m.extra["kv_store_load_timeouts_total"] = static_cast<double>(kv_load_timeouts_);
    m.extra["kv_store_blocks_saved_total"] = static_cast<double>(kv_blocks_saved_);
    m.extra["kv_store_save_failures_total"] = static_cast<double>(kv_save_failures_);
    m.extra["swa_pool_snapshots_used_total"] = static_cast<double>(kv_pool_snapshots_used_);
    {
      std::lock_guard<std::mutex> lock(kv_inbox_->mu);
      m.extra["kv_store_import_failures_total"] = static_cast<double>(kv_inbox_->import_failures);
    }
    try {
      connector_->add_metrics(m.extra);
    } catch (...) {
      // Metrics are published after every step: a connector that fails here must not end the loop.
      if (kv_metrics_failures_++ == 0) {
        DSINFER_LOG_WARN("engine: the KV connector's metrics failed (logged once): ", current_exception_message());
      }
    }
    m.extra["kv_connector_metrics_failures_total"] = static_cast<double>(kv_metrics_failures_);
  }
  if (draft_total_ > 0) {
    m.extra["draft_acceptance_rate"] = static_cast<double>(accepted_total_) / static_cast<double>(draft_total_);
  }
  return m;
}

}  // namespace dsinfer::engine
