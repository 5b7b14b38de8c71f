#include "cli/common_flags.h"

#include "core/error.h"

namespace dsinfer::cli {

void add_model_flags(Args& args, const std::string& model_help) {
  args.option("model", "DIR", model_help);
  args.option("numerics", "MODE",
              "exact (fp32 activations), reference (activation FP8 QDQ, bf16 storage) or fast (int8 activations x "
              "FP4 routed experts as integer dots, and bf16 dot products for the BF16 head on AVX-512 BF16; not "
              "yet the default: its fidelity is still being measured)",
              "exact");
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
  f.speculation = args.has("speculation");
  f.draft_tokens = static_cast<int32_t>(args.get_int("draft-tokens", 1, kMaxDraftTokens));
  return f;
}

}  // namespace dsinfer::cli
