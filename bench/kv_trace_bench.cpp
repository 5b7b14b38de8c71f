// A multi-turn agent trace over the KV tiers: S sessions share a long system prompt; each turn appends
// a tool output to the session's history and asks for a short answer; sessions are interleaved turn by
// turn and the prefix cache is capped below what they need together, so the memory tier alone cannot
// hold them and later turns come back from the KV store (with the SWA pool's window snapshots).
// Reports the token reuse, where the reused tokens came from (memory, store) and the mean TTFT of the
// first turns (system prompt only shared) against later turns.
// Usage: bench_kv_trace MODEL_DIR STORE_DIR [sessions = 3] [turns = 10] [system tokens = 1024]
//        [tool tokens = 64] [answer tokens = 8] [prefix-cache blocks = 16]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <vector>

#include "engine/deepseek_v4/v4_runner.h"
#include "engine/engine.h"
#include "engine/kvstore/kv_connector_store.h"

namespace {

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

struct Turn {
  double ttft = 0;
  int64_t cached = 0;
  std::vector<int32_t> tokens;
};

Turn run_one(engine::Engine& e, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  engine::RequestSpec s = engine::fixed_length_greedy(prompt, max_tokens);
  s.traffic_class = "agent";
  std::promise<void> done;
  Turn out;
  const auto t0 = Clock::now();
  auto r = e.submit(s, [&](const engine::TokenEvent& ev) {
    if (out.ttft == 0 && (!ev.tokens.empty() || ev.finish != engine::FinishReason::kNone))
      out.ttft = std::chrono::duration<double>(Clock::now() - t0).count();
    out.tokens.insert(out.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    out.cached = ev.cached_tokens;
    if (ev.finish != engine::FinishReason::kNone) done.set_value();
  });
  if (r.status != engine::SubmitStatus::kAccepted) {
    std::fprintf(stderr, "submit refused: %s\n", r.message.c_str());
    std::exit(1);
  }
  done.get_future().get();
  return out;
}

double extra(const engine::Engine& e, const char* name) {
  const auto m = e.metrics();
  auto it = m.extra.find(name);
  return it == m.extra.end() ? 0 : it->second;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: bench_kv_trace MODEL_DIR STORE_DIR [sessions] [turns] [system] [tool] [answer] [cache blocks]\n");
    return 2;
  }
  const std::string model_dir = argv[1], store_dir = argv[2];
  auto arg = [&](int i, int def) { return argc > i ? std::atoi(argv[i]) : def; };
  const int sessions = arg(3, 3), turns = arg(4, 10), system = arg(5, 1024), tool = arg(6, 64), answer = arg(7, 8);
  const int cache_blocks = arg(8, 16);
  auto runner = engine::open_model(model_dir);
  const engine::ModelInfo& info = runner->info();
  std::mt19937 rng(1);
  auto tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = 1000 + static_cast<int32_t>(rng() % 30000);
    return v;
  };
  engine::StoreConnectorOptions so;
  so.store.dir = store_dir;
  so.pool.capacity_bytes = int64_t{4} << 30;
  auto connector = std::make_shared<engine::StoreConnector>(so);
  engine::EngineOptions o;
  o.kv_budget_bytes = int64_t{8} << 30;
  o.max_batch_tokens = 4096;
  o.prefix_cache_bytes = cache_blocks * info.block_bytes + 2 * info.snapshot_bytes;
  o.kv_connector = connector;
  auto engine = engine::make_engine(runner, o);
  run_one(*engine, tokens(64), 1);  // warm-up

  const std::vector<int32_t> sys = tokens(system);
  std::vector<std::vector<int32_t>> history(sessions, sys);
  int64_t prompt_total = 0, cached_total = 0;
  double ttft_first = 0, ttft_later = 0;
  int n_first = 0, n_later = 0;
  const double imported0 = extra(*engine, "kv_store_blocks_imported_total");
  for (int t = 0; t < turns; ++t) {
    for (int s = 0; s < sessions; ++s) {
      const std::vector<int32_t> out = tokens(tool);
      history[s].insert(history[s].end(), out.begin(), out.end());
      const Turn r = run_one(*engine, history[s], answer);
      history[s].insert(history[s].end(), r.tokens.begin(), r.tokens.end());
      prompt_total += static_cast<int64_t>(history[s].size() - r.tokens.size());
      cached_total += r.cached;
      (t == 0 ? ttft_first : ttft_later) += r.ttft;
      ++(t == 0 ? n_first : n_later);
      std::printf("turn %2d session %d: prompt %6zu cached %6lld TTFT %7.3f s\n", t, s,
                  history[s].size() - r.tokens.size(), static_cast<long long>(r.cached), r.ttft);
      std::fflush(stdout);
    }
  }
  const double store_tokens = (extra(*engine, "kv_store_blocks_imported_total") - imported0) * info.block_tokens;
  std::printf("\n%d sessions x %d turns, system %d, tool %d, answer %d; prefix cache capped at %d blocks\n", sessions,
              turns, system, tool, answer, cache_blocks);
  std::printf("prompt tokens %lld, reused %lld (%.1f %%): from the store (blocks imported) %.0f, from memory %.0f\n",
              static_cast<long long>(prompt_total), static_cast<long long>(cached_total),
              100.0 * static_cast<double>(cached_total) / static_cast<double>(prompt_total), store_tokens,
              static_cast<double>(cached_total) - store_tokens);
  std::printf("exact hits %.0f, replay hits %.0f, pool snapshots used %.0f, store hits %.0f / misses %.0f\n",
              extra(*engine, "prefix_cache_exact_hits_total"), extra(*engine, "prefix_cache_replay_hits_total"),
              extra(*engine, "swa_pool_snapshots_used_total"), extra(*engine, "kv_store_hits_total"),
              extra(*engine, "kv_store_misses_total"));
  std::printf("mean TTFT: first turns %.3f s, later turns %.3f s\n", ttft_first / std::max(n_first, 1),
              ttft_later / std::max(n_later, 1));
  return 0;
}
