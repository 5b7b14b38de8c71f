// A one-pass prefill of DeepSeek-V4.1 from position 0 (model-v41.md §2): logits of every position.
// Straightforward code: weights decoded to fp32 at use (FP8 32x32 blocks, FP4, BF16), fp32
// activations with double accumulation, one layer over the whole sequence at a time, driven by the
// config's layer roles. It is the first C++ forward of V4.1, for `dsinfer logits` and the golden test
// against reference/model_v41.py; it is not the engine's model (no per-sequence state, no batching,
// no chunked prefill or decode yet) and it is not fast.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/checkpoint.h"
#include "model/deepseek_v41/token_map.h"

namespace dsinfer::model::deepseek_v41 {

struct PrefillOptions {
  bool qdq = true;                  // the three QDQ steps of §2.10 (window FP8, compressed KV FP4, index FP4)
  core::ThreadPool* pool = nullptr;  // nullptr: ThreadPool::global()
};

// logits [T, vocab] row-major. token_map: required when the config has Engram layers. With
// dspark_draft0: also the DSpark draft head (§2.12) teacher-forced at every position: row p is draft 0
// of the round after p with anchor ids[p+1] (predicting token p+2), [T-1, vocab].
std::vector<float> prefill_logits(const Checkpoint& ck, const EngramTokenMap* token_map,
                                  const std::vector<int32_t>& ids, const PrefillOptions& options = {},
                                  std::vector<float>* dspark_draft0 = nullptr);

}  // namespace dsinfer::model::deepseek_v41
