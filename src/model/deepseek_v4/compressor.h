// The KV compressor (model-v4.md §2.6, §2.14 item 8): every group of `ratio` tokens becomes one
// entry by per-channel softmax pooling of learned values and scores (overlap mode for ratio 4: the
// previous group's first half of the channels joins the current group's second half). Finished
// entries are normalised, rotated at position g·ratio, quantised and appended to the sequence's
// compressed blocks (main compressor: KvCodec; the indexer's: Hadamard + IndexKeyCodec).
#pragma once

#include "model/deepseek_v4/step.h"
#include "model/deepseek_v4/weights.h"

namespace dsinfer::model::deepseek_v4 {

// u = wkv · a, s = wgate · a: [N][c·D] for every row (the caller batches these products with the
// layer's others). Writes the rows' pooling inputs into the tails and every entry whose group ends
// inside the step (unless it already exists: bounded replay).
void compressor_forward(const CompressorWeights& w, const LayerShape& ls, bool indexer, StepContext& ctx,
                        const float* u, const float* sc);

}  // namespace dsinfer::model::deepseek_v4
