// The engine with a KV connector, over the synthetic model: blocks saved by one engine and loaded by
// another (a fresh prefix cache: another process, or this one after its memory lost them) give the
// cold run's tokens; the loading state holds no other request back; a corrupted record, a timeout and a
// cancellation while loading fall back without changing an answer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/kvstore/kv_connector_store.h"
#include "engine_test_util.h"
#include "kv_test_util.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {
namespace {

std::vector<int32_t> prompt_of(int n, uint32_t seed, int vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(2, vocab - 1);  // no EOS
  std::vector<int32_t> p(n);
  for (auto& t : p) t = d(rng);
  return p;
}

EngineOptions kv_options(std::shared_ptr<KvConnector> connector) {
  EngineOptions o;
  o.kv_budget_bytes = 1 << 24;
  o.max_batch_tokens = 64;
  o.max_running = 8;
  o.kv_connector = std::move(connector);
  return o;
}

std::shared_ptr<StoreConnector> store_connector(const std::string& dir, bool pool) {
  StoreConnectorOptions o;
  o.store.dir = dir;
  o.pool.capacity_bytes = pool ? int64_t{1} << 30 : 0;
  return std::make_shared<StoreConnector>(o);
}

double metric(const Engine& e, const std::string& name) {
  const EngineMetrics m = e.metrics();
  auto it = m.extra.find(name);
  return it == m.extra.end() ? -1 : it->second;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.finish, want.finish) << what << " error: " << got.error;
}

// 85 tokens: 5 full blocks of 16 that can end a resume ((85 - 1) / 16), the snapshot boundary at 80.
RequestSpec long_request(int32_t max_tokens, uint32_t seed = 3) {
  return fixed_length_greedy(prompt_of(85, seed, ToyConfig{}.vocab), max_tokens);
}

// A connector in memory whose loads a test can hold back and release, or never answer.
class HeldConnector final : public KvConnector {
 public:
  void save_block(const KvBlockName& name, std::vector<uint8_t> bytes, const std::string&) override {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[name.key] = std::move(bytes);
  }
  void load(std::vector<KvBlockName> blocks, KvLoadCallback done) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++loads_;
    for (size_t i = 0; i < blocks.size(); ++i) pending_.push_back({blocks[i].key, i, done});
    if (!hold_) answer_locked(lock);
  }
  void save_snapshot(uint64_t key, std::shared_ptr<const WindowSnapshot> s) override {
    std::lock_guard<std::mutex> lock(mu_);
    snapshots_[key] = std::move(s);
  }
  std::shared_ptr<const WindowSnapshot> find_snapshot(uint64_t key) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = snapshots_.find(key);
    return it == snapshots_.end() ? nullptr : it->second;
  }
  void hold(bool on) {
    std::unique_lock<std::mutex> lock(mu_);
    hold_ = on;
    if (!on) answer_locked(lock);
  }
  void drop_pending() {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.clear();
  }
  size_t blocks() {
    std::lock_guard<std::mutex> lock(mu_);
    return blocks_.size();
  }
  int loads() {
    std::lock_guard<std::mutex> lock(mu_);
    return loads_;
  }

 private:
  struct Pending {
    uint64_t key;
    size_t i;
    KvLoadCallback done;
  };
  void answer_locked(std::unique_lock<std::mutex>& lock) {
    std::vector<Pending> todo;
    todo.swap(pending_);
    std::vector<std::pair<Pending, std::vector<uint8_t>>> answers;
    for (Pending& p : todo) {
      auto it = blocks_.find(p.key);
      answers.push_back({std::move(p), it == blocks_.end() ? std::vector<uint8_t>{} : it->second});
    }
    lock.unlock();
    for (auto& [p, bytes] : answers) p.done(p.i, !bytes.empty(), bytes);
    lock.lock();
  }
  std::mutex mu_;
  bool hold_ = false;
  int loads_ = 0;
  std::vector<Pending> pending_;
  std::map<uint64_t, std::vector<uint8_t>> blocks_;
  std::map<uint64_t, std::shared_ptr<const WindowSnapshot>> snapshots_;
};

// Waits until every load asked of the store so far has been answered and its callback returned. A
// cold run asks the store for its prompt's blocks while the store is still empty; under load the reader
// can answer some of those loads only after that run saved the blocks: hits the finished request no
// longer wants, imported into the shared model after its engine is gone (they would count as the next
// engine's imports) and refreshing the records' mtime (a use: it would renew their TTL). Both were seen
// at ~1 in 300 runs with two other busy processes on 2 cores.
void settle_loads(StoreConnector& connector, int64_t asked) {
  const auto& stats = connector.store().stats();
  while (stats.loads_answered.load(std::memory_order_acquire) < asked)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(EngineKvStore, AStoreHitWithAPoolSnapshotEqualsTheColdRunGreedyAndSampled) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  KvTempDir dir;
  auto connector = store_connector(dir.path(), true);
  RequestSpec greedy = long_request(12);
  RequestSpec sampled = long_request(12, 4);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 12;
  sampled.sampling.seed = 11;
  int64_t asked = 0;  // blocks every engine of this test asked the store for
  for (const RequestSpec& spec : {greedy, sampled}) {
    const Outcome want = expected_outcome(reference, spec, cfg.eos);
    {
      auto first = make_engine(model, kv_options(connector));
      auto cold = run_all(*first, {spec});
      ASSERT_EQ(cold.size(), 1u);
      expect_same(cold[0], want, "cold");
      EXPECT_EQ(cold[0].cached, 0);
      asked += static_cast<int64_t>(metric(*first, "kv_store_blocks_asked_total"));
    }
    connector->store().flush();
    ASSERT_FALSE(kv_records(dir.path()).empty());
    for (bool overlap : {false, true}) {
      // A fresh prefix cache: every block comes from the store, the window from the pool.
      EngineOptions o = kv_options(connector);
      o.overlap_scheduling = overlap;
      auto second = make_engine(model, o);
      settle_loads(*connector, asked);
      const int64_t imported_before = model->imported_blocks();
      auto hit = run_all(*second, {spec});
      ASSERT_EQ(hit.size(), 1u);
      expect_same(hit[0], want, overlap ? "store hit, overlap" : "store hit");
      EXPECT_EQ(hit[0].cached, 80);  // the 5 blocks, resumed exactly at the prompt's snapshot boundary
      EXPECT_EQ(model->imported_blocks() - imported_before, 5);
      EXPECT_EQ(metric(*second, "kv_store_blocks_imported_total"), 5);
      EXPECT_EQ(metric(*second, "swa_pool_snapshots_used_total"), 1);
      EXPECT_EQ(metric(*second, "prefix_cache_exact_hits_total"), 1);
      EXPECT_GE(metric(*second, "kv_store_hits_total"), 5);
      asked += static_cast<int64_t>(metric(*second, "kv_store_blocks_asked_total"));
    }
  }
}

TEST(EngineKvStore, WithoutAPoolSnapshotAStoreHitIsABoundedReplayAndRewritesNothing) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  KvTempDir dir;
  RequestSpec spec = long_request(6);
  {
    auto connector = store_connector(dir.path(), false);
    auto first = make_engine(model, kv_options(connector));
    ASSERT_EQ(run_all(*first, {spec}).size(), 1u);
    connector->store().flush();
  }
  const size_t records = kv_records(dir.path()).size();
  EXPECT_EQ(records, 5u);  // the prompt's 5 full blocks (the output ends before a sixth)
  auto connector = store_connector(dir.path(), false);  // another process: no pool entry
  auto second = make_engine(model, kv_options(connector));
  auto hit = run_all(*second, {spec});
  ASSERT_EQ(hit.size(), 1u);
  EXPECT_EQ(hit[0].finish, FinishReason::kLength);
  // Replay capped at P - W = 77 positions: 4 blocks attached, the last window (8) recomputed.
  EXPECT_EQ(hit[0].cached, 4 * 16 - 8);
  EXPECT_EQ(metric(*second, "prefix_cache_replay_hits_total"), 1);
  EXPECT_EQ(metric(*second, "kv_store_blocks_saved_total"), 0);
}

TEST(EngineKvStore, ACorruptedRecordIsAMissAndTheAnswerIsTheColdOne) {
  ToyConfig cfg;
  ToyModel reference(cfg);
  auto model = std::make_shared<ToyModel>(cfg);
  KvTempDir dir;
  RequestSpec spec = long_request(10);
  const Outcome want = expected_outcome(reference, spec, cfg.eos);
  auto connector = store_connector(dir.path(), true);
  {
    auto first = make_engine(model, kv_options(connector));
    ASSERT_EQ(run_all(*first, {spec}).size(), 1u);
    connector->store().flush();
  }
  auto files = kv_records(dir.path());
  ASSERT_EQ(files.size(), 5u);
  for (const auto& f : files) {  // flip the last payload byte of every record
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1, std::ios::end);
    char c = 0;
    io.read(&c, 1);
    c ^= 0x5A;
    io.seekp(-1, std::ios::end);
    io.write(&c, 1);
  }
  auto second = make_engine(model, kv_options(connector));
  auto out = run_all(*second, {spec});
  ASSERT_EQ(out.size(), 1u);
  expect_same(out[0], want, "after corruption");
  EXPECT_EQ(out[0].cached, 0);
  EXPECT_GE(metric(*second, "kv_store_rejected_total"), 1);
  EXPECT_EQ(metric(*second, "kv_store_blocks_imported_total"), 0);
}

// A store that already holds a long request's blocks (written by a first engine), and a connector whose
// answers the test can hold back.
class EngineKvStoreHeld : public ::testing::Test {
 protected:
  void SetUp() override {
    auto first = make_engine(model, kv_options(connector));
    ASSERT_EQ(run_all(*first, {spec}).size(), 1u);
  }
  ToyConfig cfg;
  ToyModel reference{cfg};
  std::shared_ptr<ToyModel> model = std::make_shared<ToyModel>(cfg);
  std::shared_ptr<HeldConnector> connector = std::make_shared<HeldConnector>();
  RequestSpec spec = long_request(8);
};

TEST_F(EngineKvStoreHeld, ARequestWaitingForItsBlocksHoldsNoOtherBack) {
  ASSERT_EQ(connector->blocks(), 5u);
  for (bool overlap : {false, true}) {
    connector->hold(true);
    EngineOptions o = kv_options(connector);
    o.overlap_scheduling = overlap;
    o.kv_load_timeout_ms = 600'000;  // only the release ends the wait
    auto engine = make_engine(model, o);
    Collector c;
    c.expect(1);
    // 12 tokens: no full block to load, so nothing of it waits on the held connector.
    RequestSpec other = fixed_length_greedy(prompt_of(12, 9, cfg.vocab), 10);
    ASSERT_EQ(engine->submit(spec, c.callback(0)).status, SubmitStatus::kAccepted);
    ASSERT_EQ(engine->submit(other, c.callback(1)).status, SubmitStatus::kAccepted);
    ASSERT_TRUE(c.wait());  // the second request finished while the first waits for its blocks
    expect_same(c.get(1), expected_outcome(reference, other, cfg.eos), "the other request");
    EXPECT_EQ(c.get(0).finish, FinishReason::kNone);
    EXPECT_EQ(engine->metrics().extra.at("kv_loading"), 1);
    c.expect(1);
    connector->hold(false);
    ASSERT_TRUE(c.wait());
    expect_same(c.get(0), expected_outcome(reference, spec, cfg.eos), "the loaded request");
    EXPECT_EQ(c.get(0).cached, 80);
  }
}

TEST_F(EngineKvStoreHeld, CancellingARequestWhileItsBlocksLoadEndsIt) {
  connector->hold(true);
  EngineOptions o = kv_options(connector);
  o.kv_load_timeout_ms = 600'000;
  auto engine = make_engine(model, o);
  Collector c;
  c.expect(1);
  const SubmitResult r = engine->submit(spec, c.callback(0));
  ASSERT_EQ(r.status, SubmitStatus::kAccepted);
  engine->cancel(r.id);
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.get(0).finish, FinishReason::kCancelled);
  EXPECT_TRUE(c.get(0).tokens.empty());
  connector->hold(false);  // the answers now find no request
  auto again = run_all(*engine, {spec});
  ASSERT_EQ(again.size(), 1u);
  expect_same(again[0], expected_outcome(reference, spec, cfg.eos), "after the cancelled load");
  EXPECT_EQ(engine->metrics().extra.at("kv_loading"), 0);
}

TEST_F(EngineKvStoreHeld, ALoadThatNeverAnswersTimesOutIntoAColdPrefill) {
  connector->hold(true);
  EngineOptions o = kv_options(connector);
  o.kv_load_timeout_ms = 20;
  auto engine = make_engine(model, o);
  auto out = run_all(*engine, {spec});
  ASSERT_EQ(out.size(), 1u);
  expect_same(out[0], expected_outcome(reference, spec, cfg.eos), "after the timeout");
  EXPECT_EQ(out[0].cached, 0);
  EXPECT_EQ(metric(*engine, "kv_store_load_timeouts_total"), 1);
  connector->drop_pending();
}

TEST(EngineKvStore, TheConnectorsCollectorExpiresRecordsOnItsTimer) {
  ToyConfig cfg;
  auto model = std::make_shared<ToyModel>(cfg);
  KvTempDir dir;
  std::atomic<int64_t> now{int64_t{1'780'000'000} * kvstore::kNsPerSecond};
  StoreConnectorOptions o;
  o.store.dir = dir.path();
  o.store.clock = [&now] { return now.load(); };
  o.gc_interval_ns = 1'000'000;  // 1 ms
  auto connector = std::make_shared<StoreConnector>(o);
  int64_t asked = 0;
  {
    auto engine = make_engine(model, kv_options(connector));
    ASSERT_EQ(run_all(*engine, {long_request(4)}).size(), 1u);
    asked = static_cast<int64_t>(metric(*engine, "kv_store_blocks_asked_total"));
  }
  connector->store().flush();
  ASSERT_EQ(kv_records(dir.path()).size(), 5u);
  // A load answered late (after the clock moved) is a use of its record, which would renew its TTL.
  settle_loads(*connector, asked);
  now += 8 * 86400 * kvstore::kNsPerSecond;  // past both TTLs (agent 3 d, chat 7 d)
  for (int i = 0; i < 60000 && connector->store().stats().gc_expired.load() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polls a condition; the bound is only a guard
  }
  EXPECT_EQ(connector->store().stats().gc_expired.load(), 5);
  EXPECT_TRUE(kv_records(dir.path()).empty());
}

}  // namespace
}  // namespace dsinfer::engine::testing
