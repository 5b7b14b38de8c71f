// What the numerics modes compute, as a number the KV caches key on (the engine's cache layout string).
// Bump it whenever a change gives any mode other bits (another bf16-dot site in fast numerics, another
// summation order), so that KV blocks an earlier build persisted or shares are not resumed by this one.
//   1: up to 2026-12-03 (implicit: the layout named no revision)
//   2: V4 fast numerics compute the attention logits' FP8-stored dims on bf16 dots
#pragma once

namespace dsinfer::model {

inline constexpr int kNumericsRevision = 2;

}  // namespace dsinfer::model
