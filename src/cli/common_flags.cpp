#include "cli/common_flags.h"

#include <cstdio>

#include "core/error.h"
#include "kvstore/config.h"
#if DSINFER_ENGINE_HAVE_KVSTORE
#include "engine/kvstore/kv_connector_store.h"
#endif

namespace dsinfer::cli {

void add_model_flags(Args& args, NumericsDefault numerics_default, const std::string& model_help) {
  args.option("model", "DIR", model_help);
  args.option("numerics", "MODE",
              "exact (fp32 activations), reference (activation FP8 QDQ, bf16 storage) or fast (int8 activations x "
              "FP4 routed experts as integer dots, and bf16 dot products for the BF16 head, the V4 compressors, the "
              "FP8 products and V4's attention logits on AVX-512 BF16; on V4.1 the FP8 products stay exact and there is no reference; no "
              "further from the plain fp32 numerics than the official numerics are, README 'Numerics'). Every "
              "mode is deterministic and batch invariant",
              numerics_default == NumericsDefault::kFast ? "fast" : "exact");
  args.flag("no-kv-qdq", "turn off the KV FP8 and indexer FP4 QDQ (diagnostic)");
  args.option("threads", "N", "compute threads of the model (0: $DSINFER_THREADS or every core)", "0");
}

ModelFlags read_model_flags(const Args& args, bool required) {
  ModelFlags f;
  if (required || args.has("model")) f.dir = args.get("model");
  f.numerics = args.get("numerics");
  DSINFER_CHECK(f.numerics == "exact" || f.numerics == "reference" || f.numerics == "fast",
                "--numerics must be exact, reference or fast, got '",
                f.numerics, "'");
  f.kv_qdq = !args.has("no-kv-qdq");
  f.threads = static_cast<int>(args.get_int("threads", 0, kMaxThreads));
  return f;
}

void add_engine_flags(Args& args, const EngineFlagDefaults& d) {
  args.option("kv-budget-mib", "MIB", "KV memory budget of the engine", std::to_string(d.kv_budget_mib));
  args.alias("kv-budget-mb", "kv-budget-mib");
  args.option("max-batch-tokens", "N", "tokens per forward step (prefill chunks + decode rows)",
              std::to_string(d.max_batch_tokens));
  args.alias("chunk-size", "max-batch-tokens");
  args.option("max-running", "N", "sequences in the running batch", std::to_string(d.max_running));
  args.option("max-queue", "N", "requests waiting in the engine; beyond it they are refused",
              std::to_string(d.max_queue));
  args.flag("no-prefix-cache", "do not reuse KV blocks across requests");
  args.flag("no-swa-replay", "a cached prefix without a window snapshot is recomputed instead of resumed by SWA "
            "bounded replay (approximate): every answer is exactly a cold run's");
  args.option("decoder-replay", "K",
              "decoder-side bounded replay (DeepSeek-V4.1 only; 0: off): a prompt longer than K runs the decoder "
              "layers only on its last K tokens, their windows truncated there (deepinfer-system.md 2.3; cheaper "
              "prefill, approximate answers; exact once K reaches the decoder's reach). Such requests publish no "
              "KV blocks to the prefix cache or the KV store; needs --max-batch-tokens above K",
              "0");
  args.flag("speculation", "MTP speculative decoding (lossless)");
  args.option("draft-tokens", "N", "draft tokens per step with --speculation", "1");
}

EngineFlags read_engine_flags(const Args& args) {
  EngineFlags f;
  f.kv_budget_bytes = args.get_mib_as_bytes("kv-budget-mib", 1, kMaxKvBudgetMib);
  f.max_batch_tokens = static_cast<int32_t>(args.get_int("max-batch-tokens", 1, kMaxBatchTokens));
  f.max_running = static_cast<int32_t>(args.get_int("max-running", 1, kMaxRunning));
  f.max_queue = static_cast<int32_t>(args.get_int("max-queue", 1, kMaxQueue));
  f.prefix_cache = !args.has("no-prefix-cache");
  f.swa_replay = !args.has("no-swa-replay");
  f.decoder_replay_tokens = static_cast<int32_t>(args.get_int("decoder-replay", 0, kMaxDecoderReplay));
  f.speculation = args.has("speculation");
  f.draft_tokens = static_cast<int32_t>(args.get_int("draft-tokens", 1, kMaxDraftTokens));
  return f;
}

void add_kv_store_flags(Args& args, const std::string& default_dir_help) {
  args.option("kv-store", "DIR",
              "persistent KV block store: a directory on a local disk or a shared file system (NFS, CephFS, 3FS) "
              "that every dsinfer process mounting it shares (default: " + default_dir_help + ")");
  args.flag("no-kv-store", "no persistent KV store (and no SWA pool)");
  args.option("kv-store-bytes", "N", "capacity of the store (512M, 20G, 1T): the collector evicts least recently "
              "used records above 95 % down to 85 % (0: TTLs only)", "0");
  args.option("kv-ttl", "SPEC", "store TTL per traffic class from the last use (units s, m, h, d)",
              "agent=3d,chat=7d");
  args.option("swa-pool-bytes", "N", "RAM for window (SWA) snapshots kept for the next turn's exact resume (0: off)",
              "1G");
  args.option("swa-ttl", "D", "how long an unused window snapshot stays in the SWA pool", "180s");
  args.option("kv-gc-interval", "D", "run the store's collector this often in this process (0: never)", "10m");
}

KvStoreFlags read_kv_store_flags(const Args& args, const std::string& default_dir) {
  KvStoreFlags f;
  DSINFER_CHECK(!(args.has("kv-store") && args.has("no-kv-store")), "--kv-store and --no-kv-store exclude each other");
  if (args.has("no-kv-store")) {
    f.dir.clear();
  } else if (auto dir = args.get_optional("kv-store")) {
    DSINFER_CHECK(!dir->empty(), "--kv-store needs a directory");
    f.dir = *dir;
  } else {
    f.dir = default_dir;
  }
  f.capacity_bytes = kvstore::parse_byte_size(args.get("kv-store-bytes"));
  f.ttl = args.get("kv-ttl");
  (void)kvstore::parse_ttl_policy(f.ttl);  // a bad spec fails now, naming the flag's syntax
  f.pool_bytes = kvstore::parse_byte_size(args.get("swa-pool-bytes"));
  f.pool_ttl_ns = kvstore::parse_duration_ns(args.get("swa-ttl"));
  DSINFER_CHECK(f.pool_ttl_ns > 0, "--swa-ttl must be positive");
  f.gc_interval_ns = kvstore::parse_duration_ns(args.get("kv-gc-interval"));
  return f;
}

void apply_kv_store_flags(const KvStoreFlags& f, engine::EngineOptions& options) {
  if (f.dir.empty()) return;
#if DSINFER_ENGINE_HAVE_KVSTORE
  engine::StoreConnectorOptions o;
  o.store.dir = f.dir;
  o.store.ttl = kvstore::parse_ttl_policy(f.ttl);
  o.pool.capacity_bytes = f.pool_bytes;
  o.pool.ttl_ns = f.pool_ttl_ns;
  o.gc_interval_ns = f.gc_interval_ns;
  o.gc_capacity_bytes = f.capacity_bytes;
  options.kv_connector = std::make_shared<engine::StoreConnector>(std::move(o));
  std::fprintf(stderr, "dsinfer: KV store %s (TTL %s%s), SWA pool %lld bytes\n", f.dir.c_str(), f.ttl.c_str(),
              f.capacity_bytes > 0 ? core::str_cat(", cap ", f.capacity_bytes, " bytes").c_str() : "",
              static_cast<long long>(f.pool_bytes));
#else
  (void)options;
  core::fail("this build has no KV store (src/kvstore)");
#endif
}

}  // namespace dsinfer::cli
