// Tables of a forward's wall time by stage (model::deepseek_v4::StageProfile), shared by `dsinfer bench`
// and `dsinfer bench-forward`.
#pragma once

#include <cstdint>

#include "model/deepseek_v4/stage_profile.h"

namespace dsinfer::cli {

// The profiled forwards summed per stage: wall ms, the serial part (outside parallel regions, the other
// threads idle), share of `wall_s`, parallel regions, and us per token of the `tokens` they produced.
// `what` names the forwards in the heading ("the prefill (512 tokens, one forward)").
void print_stage_totals(const model::deepseek_v4::StageProfile& p, double wall_s, int64_t tokens, int threads,
                        const char* what);

}  // namespace dsinfer::cli
