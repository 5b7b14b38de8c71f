// `dsinfer bench --decoder-replay K` (V4.1): the prefill saving of the decoder-side bounded replay
// (model/deepseek_v41/prefill.h, deepinfer-system.md §2.3) and what it costs in accuracy, both
// measured against the exact forward in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsinfer::cli {

struct DecoderReplayBench {
  std::string dir;
  bool kv_qdq = true;
  int64_t replay_tokens = 0;            // K
  std::vector<int64_t> prompt_lens;     // each timed separately
  int64_t rounds = 3;                   // timed prefills per mode and length, interleaved off / K
  int64_t decode_tokens = 32;           // greedy rows compared after the prompt
  uint32_t seed = 1;
};

// Prints, per prompt length, the prefill times (median of the interleaved rounds) off and with replay,
// their ratio, and the deviation of the next-token row and of the rows of a greedy continuation
// (teacher-forced on the exact run's greedy tokens): relative L2 error per row (median, max) and top-1
// agreement, and how many greedy tokens the two runs share before they first differ.
int run_decoder_replay_bench(const DecoderReplayBench& b);

}  // namespace dsinfer::cli
