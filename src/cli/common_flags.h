// The flags every model-running command (serve, generate, bench, bench-forward, bench-serve, logits)
// spells, documents and bounds the same way:
//   model:  --model DIR, --numerics exact|reference|fast, --no-kv-qdq, --threads N
//   engine: --kv-budget-mib MIB, --max-batch-tokens N, --max-running N, --max-queue N, --no-prefix-cache,
//           --no-swa-replay, --decoder-replay K,
//           --speculation, --draft-tokens N
//   KV store (serve, generate): --kv-store DIR, --no-kv-store, --kv-store-bytes N, --kv-ttl SPEC,
//           --swa-pool-bytes N, --swa-ttl D, --kv-gc-interval D
// (--chunk-size of bench-forward and logits is another thing: how one sequence's prompt is fed to the
// model, without the engine.) Every size is range-checked when read, so an absurd value is a clear
// error naming the flag instead of an overflow in `<< 20` or a narrowing cast.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli/args.h"
#include "engine/engine.h"

namespace dsinfer::cli {

// Bounds of the shared flags (far above any real use; low enough that nothing derived overflows).
inline constexpr int64_t kMaxDecoderReplay = int64_t{1} << 20;
inline constexpr int64_t kMaxThreads = 4096;
inline constexpr int64_t kMaxKvBudgetMib = int64_t{1} << 24;  // 16 TiB
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 20;
inline constexpr int64_t kMaxRunning = 65536;
inline constexpr int64_t kMaxQueue = int64_t{1} << 24;
inline constexpr int64_t kMaxDraftTokens = 64;

struct ModelFlags {
  std::string dir;                  // empty when --model is optional and not given
  std::string numerics = "exact";   // "exact", "reference" or "fast"
  bool kv_qdq = true;
  int threads = 0;                  // 0: $DSINFER_THREADS or every core
};

// --numerics defaults to fast for the serving commands (serve, generate, bench, bench-serve) and to exact
// for the verification tools (logits, bench-forward).
enum class NumericsDefault { kExact, kFast };
void add_model_flags(Args& args, NumericsDefault numerics_default = NumericsDefault::kExact,
                     const std::string& model_help = "checkpoint directory (config.json + safetensors)");
// `required`: --model must be given (serve has a default model instead).
ModelFlags read_model_flags(const Args& args, bool required = true);

struct EngineFlagDefaults {
  int64_t kv_budget_mib = 4096;
  int64_t max_batch_tokens = 2048;
  int64_t max_running = 64;
  int64_t max_queue = 4096;
};

struct EngineFlags {
  int64_t kv_budget_bytes = 0;
  int32_t max_batch_tokens = 0;
  int32_t max_running = 0;
  int32_t max_queue = 0;
  bool prefix_cache = true;
  bool swa_replay = true;
  int32_t decoder_replay_tokens = 0;
  bool speculation = false;
  int32_t draft_tokens = 1;
};

// --kv-budget-mb (serve) and --chunk-size (generate) are accepted as old spellings.
void add_engine_flags(Args& args, const EngineFlagDefaults& defaults = {});
EngineFlags read_engine_flags(const Args& args);

// The persistent KV store and the SWA pool (src/kvstore/README.md), behind the engine's KV connector.
struct KvStoreFlags {
  std::string dir;                 // empty: no store (and no pool)
  int64_t capacity_bytes = 0;      // the collector's cap; 0: TTLs only
  std::string ttl = "agent=3d,chat=7d";
  int64_t pool_bytes = 0;          // 0: no SWA pool
  int64_t pool_ttl_ns = 0;
  int64_t gc_interval_ns = 0;      // 0: no collector timer
};

// `default_dir`: the store used unless --kv-store or --no-kv-store says otherwise ("" = off by default).
void add_kv_store_flags(Args& args, const std::string& default_dir_help);
KvStoreFlags read_kv_store_flags(const Args& args, const std::string& default_dir);
// Sets options.kv_connector from the flags (nothing when the store is off); says on stderr what it uses.
void apply_kv_store_flags(const KvStoreFlags& flags, engine::EngineOptions& options);

}  // namespace dsinfer::cli
