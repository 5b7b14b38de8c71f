// One DeepSeek-V4 block (model-v4.md §2.2): mHC mix → attention → mHC post, mHC mix → MoE → mHC post.
#pragma once

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// X: [N][hc·d] residual streams of every row, updated in place.
void block_forward(const BlockWeights& w, const LayerShape& ls, StepContext& ctx, float* X);

}  // namespace dsinfer::model::deepseek_v4
