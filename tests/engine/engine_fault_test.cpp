// Faults inside the engine end only the requests they touched, never the process: a model that throws
// in one phase (a std::exception or std::bad_alloc) under load, a KV connector (or the block export and
// import it drives) that throws, callbacks that throw anything, shutdown() from a callback, and the
// release of a finished request's callback.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <map>
#include <new>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/engine.h"
#include "engine/kv_connector.h"
#include "engine_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

enum class Phase {
  kNone, kNewSequence, kAttach, kForward, kDraft, kTruncate, kBlock, kSnapshot, kAdoptBlock, kExportBlock, kImportBlock
};

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kNewSequence: return "new_sequence";
    case Phase::kAttach: return "attach";
    case Phase::kForward: return "forward";
    case Phase::kDraft: return "draft";
    case Phase::kTruncate: return "truncate";
    case Phase::kBlock: return "block";
    case Phase::kSnapshot: return "snapshot";
    case Phase::kAdoptBlock: return "adopt_block";
    case Phase::kExportBlock: return "export_block";
    case Phase::kImportBlock: return "import_block";
    case Phase::kNone: return "none";
  }
  return "?";
}

struct Fault {
  Phase phase;
  int64_t nth;     // the nth call of that phase throws
  bool bad_alloc;  // std::bad_alloc instead of std::runtime_error
};

// The toy model with one injected fault. Calls before the fault behave exactly like the toy model's.
class FaultyModel final : public ModelRunner {
 public:
  FaultyModel(const ToyConfig& config, Fault fault) : inner_(config), fault_(fault) {}

  const ModelInfo& info() const override { return inner_.info(); }
  core::ThreadPool& pool() override { return inner_.pool(); }
  void prepare(bool speculation, bool batch_invariant) override { inner_.prepare(speculation, batch_invariant); }

  std::unique_ptr<SequenceState> new_sequence() override {
    if (hit(Phase::kNewSequence, 1)) fail();
    return inner_.new_sequence();
  }
  void forward(std::span<const ForwardItem> items, std::vector<float>& logits) override {
    inner_.forward(items, logits);  // the sequences advanced: the engine must not trust them after this
    if (hit(Phase::kForward, static_cast<int64_t>(items.size()))) fail();
  }
  void truncate(SequenceState& seq, int64_t length) override {
    if (hit(Phase::kTruncate, 1)) fail();
    inner_.truncate(seq, length);
  }
  std::shared_ptr<const KvBlock> block(const SequenceState& seq, int64_t index) override {
    if (hit(Phase::kBlock, 1)) fail();
    return inner_.block(seq, index);
  }
  bool adopt_block(SequenceState& seq, int64_t index, const std::shared_ptr<const KvBlock>& shared) override {
    if (hit(Phase::kAdoptBlock, 1)) fail();
    return inner_.adopt_block(seq, index, shared);
  }
  std::vector<uint8_t> export_block(const KvBlock& block) override {
    if (hit(Phase::kExportBlock, 1)) fail();
    return inner_.export_block(block);
  }
  // Runs on the thread that answers a KV connector's load.
  std::shared_ptr<const KvBlock> import_block(int64_t index, std::span<const uint8_t> bytes) override {
    if (hit(Phase::kImportBlock, 1)) fail();
    return inner_.import_block(index, bytes);
  }
  std::shared_ptr<const WindowSnapshot> snapshot(const SequenceState& seq) override {
    if (hit(Phase::kSnapshot, 1)) fail();
    return inner_.snapshot(seq);
  }
  void attach(SequenceState& seq, std::span<const std::shared_ptr<const KvBlock>> blocks,
              const WindowSnapshot* snapshot) override {
    inner_.attach(seq, blocks, snapshot);  // half attached: the engine must drop the sequence
    if (hit(Phase::kAttach, 1)) fail();
  }
  std::vector<int32_t> draft(std::span<const DraftItem> items) override {
    if (hit(Phase::kDraft, static_cast<int64_t>(items.size()))) fail();
    return inner_.draft(items);
  }

  int64_t fired() const { return fired_.load(); }
  int64_t faulted_items() const { return faulted_items_.load(); }  // sequences in the call that threw
  const ToyModel& inner() const { return inner_; }
  ToyModel& inner() { return inner_; }

 private:
  bool hit(Phase p, int64_t items) {
    if (p != fault_.phase || ++calls_ != fault_.nth) return false;
    faulted_items_ = items;
    return true;
  }
  [[noreturn]] void fail() {
    ++fired_;
    if (fault_.bad_alloc) throw std::bad_alloc();
    throw std::runtime_error("injected fault");
  }

  ToyModel inner_;
  Fault fault_;
  // Atomic: import_block runs on a connector's thread (only one phase ever counts calls, though).
  std::atomic<int64_t> calls_{0}, fired_{0}, faulted_items_{0};
};

// Requests sharing a two-block prefix (so later ones attach cached blocks), greedy or sampled.
std::vector<RequestSpec> workload(std::mt19937& rng, int n, const std::vector<int32_t>& prefix, bool sampled,
                                  int vocab) {
  std::uniform_int_distribution<int> tok(2, vocab - 1), tail(3, 40), len(6, 24);
  std::vector<RequestSpec> specs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = prefix;
    for (int k = tail(rng); k > 0; --k) p.push_back(tok(rng));
    RequestSpec s = fixed_length_greedy(p, len(rng));
    if (sampled && i % 3 == 1) {
      s.sampling.temperature = 0.8f;
      s.sampling.top_k = 20;
      s.sampling.seed = static_cast<uint64_t>(i);
    }
    specs.push_back(s);
  }
  return specs;
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// Runs the waves one after the other. Every request either gives the fault-free reference's outcome
// or ends with the injected error after a prefix of the reference's tokens; adds those to *errors.
// `before_wave(w)` runs before wave w (checks that need the earlier waves done).
void run_waves(Engine& engine, const std::vector<std::vector<RequestSpec>>& waves, ToyModel& reference, int32_t eos,
               bool bad_alloc, const std::function<void(size_t)>& before_wave, int64_t* errors) {
  for (size_t w = 0; w < waves.size(); ++w) {
    before_wave(w);
    const auto out = run_all(engine, waves[w]);
    ASSERT_EQ(out.size(), waves[w].size()) << "wave " << w << " did not finish";
    for (size_t i = 0; i < out.size(); ++i) {
      const Outcome want = expected_outcome(reference, waves[w][i], eos);
      const std::string what = "wave " + std::to_string(w) + " request " + std::to_string(i);
      if (out[i].finish == FinishReason::kError) {
        ++*errors;
        EXPECT_NE(out[i].error.find(bad_alloc ? "bad_alloc" : "injected fault"), std::string::npos)
            << what << ": " << out[i].error;
        EXPECT_TRUE(is_prefix(out[i].tokens, want.tokens)) << what;
      } else {
        EXPECT_EQ(out[i].tokens, want.tokens) << what;
        EXPECT_EQ(out[i].finish, want.finish) << what << " error: " << out[i].error;
      }
    }
  }
}

TEST(EngineFaults, AModelFaultEndsOnlyTheRequestsOfItsStep) {
  const std::vector<Fault> faults = {
      {Phase::kNewSequence, 5, false}, {Phase::kNewSequence, 9, true}, {Phase::kAttach, 3, false},
      {Phase::kForward, 6, false},     {Phase::kForward, 11, true},    {Phase::kDraft, 4, false},
      {Phase::kTruncate, 3, false},    {Phase::kBlock, 5, false},      {Phase::kSnapshot, 4, true},
  };  // adopt_block needs a schedule this workload does not force: its own test below
  ToyConfig cfg;
  ToyModel reference(cfg);
  for (const Fault& fault : faults) {
    for (bool overlap : {true, false}) {
      const bool speculative = fault.phase == Phase::kDraft || fault.phase == Phase::kTruncate;
      SCOPED_TRACE(std::string(phase_name(fault.phase)) + " #" + std::to_string(fault.nth) +
                   (fault.bad_alloc ? " bad_alloc" : "") + (overlap ? " overlap" : " sequential"));
      auto model = std::make_shared<FaultyModel>(cfg, fault);
      EngineOptions o;
      o.kv_budget_bytes = 1 << 24;
      o.max_batch_tokens = 64;
      o.max_running = 8;
      o.overlap_scheduling = overlap;
      o.swa_replay = false;            // every hit is exact: outputs equal the engine-free reference
      o.snapshot_every_block = true;   // so that later requests attach the shared prefix
      o.speculation = speculative;     // drafts and rollbacks (greedy only: equal to the reference)
      o.draft_tokens = 3;
      auto engine = make_engine(model, o);

      std::mt19937 rng(11);
      std::vector<int32_t> prefix(2 * cfg.block_tokens);
      for (auto& t : prefix) t = 2 + static_cast<int32_t>(rng() % (cfg.vocab - 2));
      // Two waves under load (16 concurrent requests each, 8 running), then one after the fault.
      std::vector<std::vector<RequestSpec>> waves;
      for (int n : {16, 16, 8}) waves.push_back(workload(rng, n, prefix, !speculative, cfg.vocab));
      int64_t errors = 0;
      run_waves(*engine, waves, reference, cfg.eos, fault.bad_alloc, [&](size_t w) {
        if (w == 2) {
          EXPECT_EQ(model->fired(), 1) << "the fault must have happened in the first two waves";
        }
      }, &errors);
      if (HasFatalFailure()) return;
      switch (fault.phase) {
        case Phase::kForward:
          EXPECT_EQ(errors, model->faulted_items());  // every sequence of the forward, no other
          break;
        case Phase::kDraft:
          // The step's prefill entries go with its drafting ones; never more than one step holds.
          EXPECT_GE(errors, model->faulted_items());
          EXPECT_LE(errors, o.max_running);
          break;
        default:
          EXPECT_EQ(errors, 1);  // one sequence was touched: one request ends
      }
      engine->shutdown(true);
      EXPECT_EQ(model->inner().live_sequences(), 0);
      const EngineMetrics m = engine->metrics();
      EXPECT_EQ(m.running, 0);
      EXPECT_EQ(m.waiting, 0);
      EXPECT_EQ(m.kv_bytes_used, m.extra.at("prefix_cache_bytes"));  // nothing left charged to requests
    }
  }
}

// adopt_block runs only when two requests computed one block in flight at once, which a free-running
// workload gets only when its submissions happen to beat the engine's first plan. Here a first request
// holds the engine inside its forward until both sharers are queued, so the next plan takes them together
// on every run (in the overlap mode too: the plan after the held step cannot see their blocks published).
TEST(EngineFaults, AnAdoptBlockFaultEndsOnlyTheRequestThatAdopted) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    auto model = std::make_shared<FaultyModel>(cfg, Fault{Phase::kAdoptBlock, 1, false});
    std::promise<void> entered, open;
    std::shared_future<void> opened = open.get_future().share();
    std::once_flag first;
    model->inner().before_forward = [&, opened] {
      std::call_once(first, [&] { entered.set_value(); });
      opened.wait();
    };
    EngineOptions o;
    o.kv_budget_bytes = 1 << 24;
    o.max_batch_tokens = 64;  // both sharers' prompts (and the holder's decode) fit one step
    o.max_running = 8;
    o.overlap_scheduling = overlap;
    o.swa_replay = false;
    auto engine = make_engine(model, o);
    bool released = false;
    auto release = [&] {
      if (!released) open.set_value();
      released = true;
    };
    // Destroyed before the engine: an early return must not leave its step held in the forward.
    std::unique_ptr<void, std::function<void(void*)>> guard(&released, [&](void*) { release(); });

    std::vector<int32_t> block(cfg.block_tokens);
    for (size_t i = 0; i < block.size(); ++i) block[i] = 2 + static_cast<int32_t>((7 * i + 3) % (cfg.vocab - 2));
    std::vector<RequestSpec> specs;
    specs.push_back(fixed_length_greedy({5, 6, 7}, 2));  // the holder: shares nothing
    for (int32_t tail : {11, 23}) {
      std::vector<int32_t> p = block;
      for (int32_t k = 0; k < 4; ++k) p.push_back(tail + k);
      specs.push_back(fixed_length_greedy(p, 4));
    }
    Collector c;
    c.expect(specs.size());
    ASSERT_EQ(engine->submit(specs[0], c.callback(0)).status, SubmitStatus::kAccepted);
    entered.get_future().wait();  // the holder's step is in its forward: no later plan has run
    for (size_t i = 1; i < specs.size(); ++i) {
      ASSERT_EQ(engine->submit(specs[i], c.callback(i)).status, SubmitStatus::kAccepted);
    }
    release();
    ASSERT_TRUE(c.wait());
    EXPECT_EQ(model->fired(), 1) << "the second sharer must have adopted the first one's block";
    int errors = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      const Outcome got = c.get(i), want = expected_outcome(reference, specs[i], cfg.eos);
      if (got.finish == FinishReason::kError) {
        ++errors;
        EXPECT_NE(i, 0u) << "the holder computed no shared block";
        EXPECT_NE(got.error.find("injected fault"), std::string::npos) << got.error;
        EXPECT_TRUE(is_prefix(got.tokens, want.tokens)) << "request " << i;
      } else {
        EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
        EXPECT_EQ(got.finish, want.finish) << "request " << i;
      }
    }
    EXPECT_EQ(errors, 1);
    // The cache kept the first sharer's block: a later request attaches it and gets the reference.
    const std::vector<RequestSpec> later = {specs[1]};
    const auto out = run_all(*engine, later);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].tokens, expected_outcome(reference, specs[1], cfg.eos).tokens);
    engine->shutdown(true);
    EXPECT_EQ(model->inner().live_sequences(), 0);
    const EngineMetrics m = engine->metrics();
    EXPECT_EQ(m.running, 0);
    EXPECT_EQ(m.kv_bytes_used, m.extra.at("prefix_cache_bytes"));
  }
}

enum class KvCall { kNone, kLoad, kSaveBlock, kSaveSnapshot, kFindSnapshot, kMetrics };

const char* kv_call_name(KvCall c) {
  switch (c) {
    case KvCall::kLoad: return "load";
    case KvCall::kSaveBlock: return "save_block";
    case KvCall::kSaveSnapshot: return "save_snapshot";
    case KvCall::kFindSnapshot: return "find_snapshot";
    case KvCall::kMetrics: return "add_metrics";
    case KvCall::kNone: return "none";
  }
  return "?";
}

struct KvFault {
  KvCall call = KvCall::kNone;
  int64_t nth = 0;         // the nth call throws
  bool bad_alloc = false;
  bool persistent = false;  // and every later one too (a store that went away)
};

// A KV connector in memory that answers loads at once, on the caller's thread, and throws from one of
// its calls once armed. Shared by a fault-free engine that fills it and the engine under test.
class FaultyConnector final : public KvConnector {
 public:
  void arm(KvFault fault) {
    std::lock_guard<std::mutex> lock(mu_);
    fault_ = fault;
  }
  void save_block(const KvBlockName& name, std::vector<uint8_t> bytes, const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    check(KvCall::kSaveBlock);
    blocks_[name.key] = std::move(bytes);
  }
  void load(std::vector<KvBlockName> blocks, KvLoadCallback done) override {
    std::vector<const std::vector<uint8_t>*> found(blocks.size(), nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      check(KvCall::kLoad);
      for (size_t i = 0; i < blocks.size(); ++i) {
        auto it = blocks_.find(blocks[i].key);
        if (it != blocks_.end()) found[i] = &it->second;  // records are never replaced while loads run
      }
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      done(i, found[i] != nullptr, found[i] ? std::span<const uint8_t>(*found[i]) : std::span<const uint8_t>());
    }
  }
  void save_snapshot(uint64_t key, std::shared_ptr<const WindowSnapshot> snapshot) override {
    std::lock_guard<std::mutex> lock(mu_);
    check(KvCall::kSaveSnapshot);
    snapshots_[key] = std::move(snapshot);
  }
  std::shared_ptr<const WindowSnapshot> find_snapshot(uint64_t key) override {
    std::lock_guard<std::mutex> lock(mu_);
    check(KvCall::kFindSnapshot);
    auto it = snapshots_.find(key);
    return it == snapshots_.end() ? nullptr : it->second;
  }
  void add_metrics(std::map<std::string, double>& extra) const override {
    std::lock_guard<std::mutex> lock(mu_);
    check(KvCall::kMetrics);
    extra["test_connector_blocks"] = static_cast<double>(blocks_.size());
  }
  int64_t fired() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }
  size_t blocks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return blocks_.size();
  }

 private:
  void check(KvCall c) const {
    if (c != fault_.call) return;
    const int64_t n = ++calls_;
    if (n != fault_.nth && !(fault_.persistent && n > fault_.nth)) return;
    ++fired_;
    if (fault_.bad_alloc) throw std::bad_alloc();
    throw std::runtime_error("injected connector fault");
  }
  mutable std::mutex mu_;
  KvFault fault_;
  mutable int64_t calls_ = 0, fired_ = 0;
  std::unordered_map<uint64_t, std::vector<uint8_t>> blocks_;
  std::unordered_map<uint64_t, std::shared_ptr<const WindowSnapshot>> snapshots_;
};

// The KV store is a cache: a connector that throws (from any call, once or from then on) or a block
// that cannot be exported or imported costs at most the store's help, never an answer. A fault-free
// engine fills the store first, so the engine under test loads, imports and saves under load.
// An engine over a KV connector, small enough that the waves below preempt and reuse; no replay, so
// every hit is exact and outputs equal the engine-free reference.
EngineOptions store_options(std::shared_ptr<KvConnector> connector, bool overlap, bool snapshot_every_block) {
  EngineOptions o;
  o.kv_budget_bytes = 1 << 24;
  o.max_batch_tokens = 64;
  o.max_running = 8;
  o.overlap_scheduling = overlap;
  o.swa_replay = false;
  o.snapshot_every_block = snapshot_every_block;
  o.kv_connector = std::move(connector);
  return o;
}

TEST(EngineFaults, AKvConnectorOrBlockTransferFaultCostsOnlyTheStore) {
  struct Case {
    Fault model;
    KvFault kv;
    int64_t errors;  // requests that end with kError
  };
  const std::vector<Case> cases = {
      {{Phase::kNone, 0, false}, {KvCall::kLoad, 3, false}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kLoad, 2, true, true}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kSaveBlock, 5, true}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kSaveSnapshot, 4, false}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kFindSnapshot, 2, false, true}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kFindSnapshot, 3, true}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kMetrics, 3, false}, 0},
      {{Phase::kNone, 0, false}, {KvCall::kMetrics, 1, true, true}, 0},
      {{Phase::kExportBlock, 3, false}, {}, 0},
      {{Phase::kImportBlock, 4, true}, {}, 0},
  };
  ToyConfig cfg;
  ToyModel reference(cfg);
  for (const Case& c : cases) {
    for (bool overlap : {true, false}) {
      SCOPED_TRACE(std::string(phase_name(c.model.phase)) + " #" + std::to_string(c.model.nth) + " / " +
                   kv_call_name(c.kv.call) + " #" + std::to_string(c.kv.nth) +
                   (c.kv.persistent ? " and later" : "") + (c.model.bad_alloc || c.kv.bad_alloc ? " bad_alloc" : "") +
                   (overlap ? " overlap" : " sequential"));
      auto connector = std::make_shared<FaultyConnector>();
      // Snapshots at every boundary go to the connector's pool too.
      EngineOptions o = store_options(connector, overlap, /*snapshot_every_block=*/true);

      std::mt19937 rng(11);
      std::vector<int32_t> prefix(2 * cfg.block_tokens);
      for (auto& t : prefix) t = 2 + static_cast<int32_t>(rng() % (cfg.vocab - 2));
      std::vector<std::vector<RequestSpec>> waves;
      for (int n : {16, 16, 8}) waves.push_back(workload(rng, n, prefix, true, cfg.vocab));
      {
        auto warm = make_engine(std::make_shared<ToyModel>(cfg), o);
        ASSERT_EQ(run_all(*warm, waves[0]).size(), waves[0].size());
        warm->shutdown(true);
      }
      ASSERT_GT(connector->blocks(), 0u);
      connector->arm(c.kv);
      auto model = std::make_shared<FaultyModel>(cfg, c.model);
      auto engine = make_engine(model, o);
      // The warmed wave again (its blocks come from the store), a new one, and one after the fault.
      int64_t errors = 0;
      run_waves(*engine, waves, reference, cfg.eos, c.model.bad_alloc, [&](size_t w) {
        if (w == 2) {
          EXPECT_GE(model->fired() + connector->fired(), 1) << "the fault must have happened in the first two waves";
        }
      }, &errors);
      if (HasFatalFailure()) return;
      EXPECT_EQ(errors, c.errors);
      engine->shutdown(true);
      EXPECT_EQ(model->inner().live_sequences(), 0);
      const EngineMetrics m = engine->metrics();
      EXPECT_EQ(m.running, 0);
      EXPECT_EQ(m.waiting, 0);
      EXPECT_EQ(m.kv_bytes_used, m.extra.at("prefix_cache_bytes"));  // nothing left charged to requests
      if (c.kv.call == KvCall::kMetrics) {
        // Still published after the fault, without the connector's own gauges when it fails.
        EXPECT_GE(m.extra.at("kv_connector_metrics_failures_total"), 1);
        EXPECT_EQ(m.extra.count("test_connector_blocks"), c.kv.persistent ? 0u : 1u);
      }
      if (c.model.phase == Phase::kImportBlock) {
        EXPECT_GE(m.extra.at("kv_store_import_failures_total"), 1);
      }
      if (c.model.phase == Phase::kExportBlock) {
        EXPECT_GE(m.extra.at("kv_store_save_failures_total"), 1);
      }
    }
  }
}

// A snapshot pool that stays down while loaded blocks join the cache: the request is admitted without
// the store. It used to make every plan throw again (the pool is asked for the snapshot of the last
// block memory held, which memory lacks), so no step ran for anybody and nothing was answered.
TEST(EngineFaults, ASnapshotPoolThatStaysDownDoesNotStopPlanning) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    auto connector = std::make_shared<FaultyConnector>();
    // The shared prefix's last block (position 32) keeps no snapshot.
    EngineOptions o = store_options(connector, overlap, /*snapshot_every_block=*/false);
    auto engine = make_engine(std::make_shared<ToyModel>(cfg), o);

    std::mt19937 rng(5);
    std::uniform_int_distribution<int> tok(2, cfg.vocab - 1);
    std::vector<int32_t> prefix(2 * cfg.block_tokens);
    for (auto& t : prefix) t = tok(rng);
    // Prefix + 40 tokens: four full blocks that can end a resume; the prompt's snapshot is at 64 only.
    auto long_prompt = [&] {
      std::vector<int32_t> p = prefix;
      for (int k = 0; k < 40; ++k) p.push_back(tok(rng));
      return p;
    };
    const std::vector<RequestSpec> first = {fixed_length_greedy(long_prompt(), 4)};
    ASSERT_EQ(run_all(*engine, first).size(), 1u);
    connector->arm({KvCall::kFindSnapshot, 1, false, true});
    // Under load: requests that hold the prefix in memory and load the rest (all misses), and short
    // ones that ask the store nothing.
    std::vector<RequestSpec> wave;
    for (int i = 0; i < 8; ++i) wave.push_back(fixed_length_greedy(long_prompt(), 6));
    for (int i = 0; i < 4; ++i) wave.push_back(fixed_length_greedy({3 + i, 4, 5, 6}, 6));
    const auto out = run_all(*engine, wave);
    ASSERT_EQ(out.size(), wave.size()) << "the engine stopped answering";
    EXPECT_GE(connector->fired(), 1);
    for (size_t i = 0; i < out.size(); ++i) {
      const Outcome want = expected_outcome(reference, wave[i], cfg.eos);
      EXPECT_EQ(out[i].tokens, want.tokens) << "request " << i;
      EXPECT_EQ(out[i].finish, want.finish) << "request " << i << " error: " << out[i].error;
    }
    engine->shutdown(true);
    const EngineMetrics m = engine->metrics();
    EXPECT_EQ(m.running, 0);
    EXPECT_EQ(m.waiting, 0);
  }
}

TEST(EngineFaults, ACallbackThrowingAnythingIsContained) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    auto engine = make_engine(std::make_shared<ToyModel>(cfg), [&] {
      EngineOptions o;
      o.overlap_scheduling = overlap;
      return o;
    }());
    std::mt19937 rng(3);
    auto specs = workload(rng, 6, {5, 6, 7}, true, cfg.vocab);
    Collector c;
    c.expect(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      TokenCallback collect = c.callback(i);
      // Request 0's callback throws something that is not a std::exception on every event.
      TokenCallback cb = i != 0 ? collect : [collect](const TokenEvent& e) {
        collect(e);
        throw 42;
      };
      ASSERT_EQ(engine->submit(specs[i], cb).status, SubmitStatus::kAccepted);
    }
    ASSERT_TRUE(c.wait());
    for (size_t i = 0; i < specs.size(); ++i) {
      const Outcome want = expected_outcome(reference, specs[i], cfg.eos);
      EXPECT_EQ(c.get(i).tokens, want.tokens) << "request " << i;
      EXPECT_EQ(c.get(i).finish, want.finish) << "request " << i;
    }
  }
}

// shutdown() from a callback only asks the loop to stop; destroying the engine from another thread
// then waits for the loop (it used to detach it and free the state the loop was still using).
TEST(EngineShutdown, FromACallbackThenDestroyedElsewhere) {
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    auto model = std::make_shared<ToyModel>(ToyConfig{});
    EngineOptions o;
    o.overlap_scheduling = overlap;
    auto engine = make_engine(model, o);
    Engine* e = engine.get();
    std::mutex mu;
    std::condition_variable cv;
    bool shut = false, destroyed = false, destroyed_seen_in_callback = false;
    std::atomic<int> finals{0};
    std::atomic<bool> first{true};
    std::atomic<bool> all_submitted{false};
    constexpr int kRequests = 6;
    for (int i = 0; i < kRequests; ++i) {
      const SubmitResult r = engine->submit(fixed_length_greedy({3, 4, 5}, 4000), [&](const TokenEvent& ev) {
        if (ev.finish != FinishReason::kNone) ++finals;
        // Only once every request is in: a submission after shutdown() is refused and gets no events
        // (a loaded machine ran request 0's first token before the loop below had submitted the rest).
        if (!all_submitted.load() || !first.exchange(false)) return;
        e->shutdown(false);  // returns at once: the loop is running this callback
        std::unique_lock<std::mutex> lock(mu);
        shut = true;
        cv.notify_all();
        // Give a destructor that does not wait for the loop the chance to finish first.
        cv.wait_for(lock, std::chrono::milliseconds(300), [&] { return destroyed; });
        destroyed_seen_in_callback = destroyed;
      });
      EXPECT_EQ(r.status, SubmitStatus::kAccepted);
    }
    all_submitted = true;
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return shut; }));
    }
    engine.reset();  // must wait for the loop, which is still inside the callback
    {
      std::lock_guard<std::mutex> lock(mu);
      destroyed = true;
      cv.notify_all();
      EXPECT_FALSE(destroyed_seen_in_callback) << "the engine was destroyed while its loop still ran";
    }
    EXPECT_EQ(finals.load(), kRequests);  // every request got its final event before the engine went
    EXPECT_EQ(model->live_sequences(), 0);
  }
}

// Destroying the engine from its own callback cannot be made safe (the loop running the callback
// would go on in freed memory): it ends the process with a message saying so.
TEST(EngineShutdownDeathTest, DestroyedFromItsOwnCallbackEndsTheProcessWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        auto holder = std::make_shared<std::unique_ptr<Engine>>(
            make_engine(std::make_shared<ToyModel>(ToyConfig{}), EngineOptions{}));
        (*holder)->submit(fixed_length_greedy({3, 4, 5}, 3), [holder](const TokenEvent& e) {
          if (e.finish != FinishReason::kNone) holder->reset();
        });
        std::promise<void>().get_future().wait();  // never ready: the engine thread ends the process
      },
      "destroyed from its own token callback");
}

// A finished request's callback (which holds an HTTP exchange in the server) is released as soon as
// its final event was delivered, not when the engine next does something.
TEST(EngineMemory, AFinishedRequestReleasesItsCallbackAtOnce) {
  struct Sentinel {
    std::mutex* mu;
    std::condition_variable* cv;
    bool* gone;
    ~Sentinel() {
      std::lock_guard<std::mutex> lock(*mu);
      *gone = true;
      cv->notify_all();
    }
  };
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "sequential");
    EngineOptions o;
    o.overlap_scheduling = overlap;
    auto engine = make_engine(std::make_shared<ToyModel>(ToyConfig{}), o);
    std::mutex mu;
    std::condition_variable cv;
    bool gone = false, final_seen = false;
    auto sentinel = std::make_shared<Sentinel>(&mu, &cv, &gone);
    ASSERT_EQ(engine
                  ->submit(fixed_length_greedy({3, 4, 5}, 5),
                           [sentinel, &mu, &final_seen](const TokenEvent& ev) {
                             if (ev.finish == FinishReason::kNone) return;
                             std::lock_guard<std::mutex> lock(mu);
                             final_seen = true;
                           })
                  .status,
              SubmitStatus::kAccepted);
    sentinel.reset();  // only the engine holds it now
    std::unique_lock<std::mutex> lock(mu);
    // The engine is idle after the final event: nothing else will happen that could release it.
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return gone; }))
        << "the callback of a finished request is still held by the idle engine";
    EXPECT_TRUE(final_seen);
  }
}

}  // namespace
}  // namespace dsinfer::engine::testing
