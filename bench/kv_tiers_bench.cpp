// KV cache tiers on a real checkpoint: time to first token of one prompt (a long shared prefix plus a
// short question) computed cold, resumed from the engine's memory (prefix cache), from the KV store
// with the window snapshot in the SWA pool (exact), and from the store alone (another process: bounded
// replay). Also the bytes the store keeps per token against the model's own compressed-KV bytes, and a
// sequential read of the store's files for the raw read rate. The page cache is not dropped (no root):
// the store's reads come from RAM here, so the store-hit numbers are a lower bound for a cold disk.
// Usage: bench_kv_tiers MODEL_DIR STORE_DIR [prefix tokens = 4096] [question tokens = 16]
//   (STORE_DIR should be empty or absent; it is filled)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <random>
#include <vector>

#include "engine/deepseek_v4/v4_runner.h"
#include "engine/engine.h"
#include "engine/kvstore/kv_connector_store.h"

namespace {

using namespace dsinfer;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Run {
  double ttft = 0;
  int64_t cached = 0;
  int32_t token = -1;
};

// Submits one request for one token and waits for it.
Run run_one(engine::Engine& e, const std::vector<int32_t>& prompt) {
  engine::RequestSpec s = engine::fixed_length_greedy(prompt, 1);
  std::promise<Run> done;
  const auto t0 = Clock::now();
  auto r = e.submit(s, [&](const engine::TokenEvent& ev) {
    if (ev.finish == engine::FinishReason::kNone) return;
    Run out;
    out.ttft = seconds_since(t0);
    out.cached = ev.cached_tokens;
    out.token = ev.tokens.empty() ? -1 : ev.tokens[0];
    done.set_value(out);
  });
  if (r.status != engine::SubmitStatus::kAccepted) {
    std::fprintf(stderr, "submit refused: %s\n", r.message.c_str());
    std::exit(1);
  }
  return done.get_future().get();
}

std::shared_ptr<engine::StoreConnector> connector(const std::string& dir, bool pool) {
  engine::StoreConnectorOptions o;
  o.store.dir = dir;
  o.pool.capacity_bytes = pool ? int64_t{4} << 30 : 0;
  return std::make_shared<engine::StoreConnector>(o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_kv_tiers MODEL_DIR STORE_DIR [prefix tokens] [question tokens]\n");
    return 2;
  }
  const std::string model_dir = argv[1], store_dir = argv[2];
  const int prefix = argc > 3 ? std::atoi(argv[3]) : 4096;
  const int question = argc > 4 ? std::atoi(argv[4]) : 16;
  auto runner = engine::open_model(model_dir);
  const engine::ModelInfo& info = runner->info();
  std::mt19937 rng(1);
  auto tokens = [&](int n) {
    std::vector<int32_t> v(n);
    for (auto& t : v) t = 1000 + static_cast<int32_t>(rng() % 30000);
    return v;
  };
  std::vector<int32_t> prompt = tokens(prefix);
  const std::vector<int32_t> q = tokens(question);
  prompt.insert(prompt.end(), q.begin(), q.end());
  std::printf("model %s: block %d tokens, %lld KV bytes per block (%.0f per token), window %d\n", model_dir.c_str(),
              info.block_tokens, static_cast<long long>(info.block_bytes),
              static_cast<double>(info.block_bytes) / info.block_tokens, info.window);
  std::printf("prompt: %d-token prefix + %d-token question\n", prefix, question);

  engine::EngineOptions base;
  base.kv_budget_bytes = int64_t{8} << 30;
  base.max_batch_tokens = 4096;

  // Cold, then the same prompt again from memory (exact resume at the prompt's snapshot boundary).
  Run cold, memory;
  {
    auto e = engine::make_engine(runner, base);
    run_one(*e, tokens(256));  // warms the code paths and the thread pool
    cold = run_one(*e, prompt);
    memory = run_one(*e, prompt);
  }
  // The store: one engine computes and saves; then fresh engines (empty prefix caches) load it.
  Run store_pool, store_replay;
  double raw_mb_s = 0;
  int64_t record_bytes = 0, records = 0, read_bytes = 0;
  double load_latency = 0;
  int64_t loads = 0;
  {
    auto c = connector(store_dir, true);
    {
      engine::EngineOptions o = base;
      o.kv_connector = c;
      auto e = engine::make_engine(runner, o);
      run_one(*e, prompt);
    }
    c->store().flush();
    for (const auto& f : std::filesystem::recursive_directory_iterator(store_dir)) {
      if (!f.is_regular_file() || f.path().extension() != ".kv") continue;
      ++records;
      record_bytes += static_cast<int64_t>(f.file_size());
    }
    // Sequential read of every record: the rate the same files come off this machine's storage.
    std::vector<char> buf(1 << 20);
    const auto t0 = Clock::now();
    int64_t raw = 0;
    for (const auto& f : std::filesystem::recursive_directory_iterator(store_dir)) {
      if (!f.is_regular_file() || f.path().extension() != ".kv") continue;
      const int fd = ::open(f.path().c_str(), O_RDONLY);
      if (fd < 0) continue;
      ssize_t n;
      while ((n = ::read(fd, buf.data(), buf.size())) > 0) raw += n;
      ::close(fd);
    }
    raw_mb_s = static_cast<double>(raw) / 1e6 / seconds_since(t0);
    engine::EngineOptions o = base;
    o.kv_connector = c;
    auto e = engine::make_engine(runner, o);
    store_pool = run_one(*e, prompt);
    read_bytes = c->store().stats().bytes_read.load();
    load_latency = static_cast<double>(c->store().stats().load_latency_ns.load()) / 1e9;
    loads = c->store().stats().loads.load();
  }
  {
    engine::EngineOptions o = base;
    o.kv_connector = connector(store_dir, false);  // another process: its pool is empty
    auto e = engine::make_engine(runner, o);
    store_replay = run_one(*e, prompt);
  }
  auto line = [&](const char* what, const Run& r) {
    std::printf("%-34s TTFT %8.3f s  (%5.1f %% of cold)  cached %6lld  first token %d\n", what, r.ttft,
                100.0 * r.ttft / cold.ttft, static_cast<long long>(r.cached), r.token);
  };
  line("cold", cold);
  line("memory hit (prefix cache)", memory);
  line("store hit + SWA pool (exact)", store_pool);
  line("store hit, no pool (bounded replay)", store_replay);
  const double stored_tokens = static_cast<double>(records) * info.block_tokens;
  std::printf("store: %lld records, %.0f bytes per token stored (model KV %.0f per token, %.3fx)\n",
              static_cast<long long>(records), static_cast<double>(record_bytes) / stored_tokens,
              static_cast<double>(info.block_bytes) / info.block_tokens,
              static_cast<double>(record_bytes) / stored_tokens / (static_cast<double>(info.block_bytes) / info.block_tokens));
  std::printf("store hit: %.1f MB read in %lld loads, mean load latency %.2f ms; raw sequential read %.0f MB/s\n",
              static_cast<double>(read_bytes) / 1e6, static_cast<long long>(loads),
              loads > 0 ? 1e3 * load_latency / static_cast<double>(loads) : 0.0, raw_mb_s);
  return 0;
}
