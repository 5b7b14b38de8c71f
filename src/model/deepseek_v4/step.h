// What the layers of one batched forward step share: the rows (sequence, position, token) in batch
// order, each sequence's slice of rows and its state, the RoPE angles of every row, the thread pool and
// a workspace of buffers that only grow (steady-state decode does not allocate).
//
// Batch invariance: every computation a layer does for a row uses only that row's data and its own
// sequence's state, in an order fixed by the row's position and the model, never by the batch layout or
// the thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "model/deepseek_v4/sequence_state.h"
#include "model/deepseek_v4/shape.h"
#include "model/deepseek_v4/stage_profile.h"
#include "model/layers/experts.h"

namespace dsinfer::model::deepseek_v4 {

struct RowInfo {
  int32_t seq = 0;    // index into StepContext::seqs
  int32_t token = 0;
  int64_t pos = 0;    // RoPE / attention position
};

struct SeqSlice {
  SequenceState* state = nullptr;
  int64_t first_row = 0;  // rows [first_row, first_row + n)
  int64_t n = 0;
  int64_t start = 0;        // position of the first row
  int64_t window_floor = 0; // lowest window position any row may attend
  int64_t replay_end = 0;   // compressed entries of groups ending at or before this exist already
};

// Buffers that keep their capacity between steps.
class Workspace {
 public:
  float* f(int slot, size_t n) { return grow(floats_, slot, n); }
  int32_t* i(int slot, size_t n) { return grow(ints_, slot, n); }
  // Per-thread scratch (thread = index given by ThreadPool::run).
  float* tf(int thread, int slot, size_t n) { return grow(thread_floats_[thread], slot, n); }
  int32_t* ti(int thread, int slot, size_t n) { return grow(thread_ints_[thread], slot, n); }
  std::vector<int32_t>& tvec(int thread) { return thread_vecs_[thread]; }
  std::vector<const float*>& tptrs(int thread) { return thread_ptrs_[thread]; }
  std::vector<const uint8_t*>& tbytes(int thread) { return thread_bytes_[thread]; }
  // The MoE expert stage's buffers (model/layers/experts.h).
  layers::ExpertScratch& experts() { return experts_; }
  void set_threads(int n) {
    if (static_cast<int>(thread_floats_.size()) >= n) return;
    thread_floats_.resize(n);
    thread_ints_.resize(n);
    thread_vecs_.resize(n);
    thread_ptrs_.resize(n);
    thread_bytes_.resize(n);
  }

 private:
  template <typename T>
  static T* grow(std::vector<std::vector<T>>& pool, int slot, size_t n) {
    if (static_cast<int>(pool.size()) <= slot) pool.resize(slot + 1);
    auto& v = pool[slot];
    if (v.size() < n) v.resize(n);
    return v.data();
  }
  std::vector<std::vector<float>> floats_;
  std::vector<std::vector<int32_t>> ints_;
  std::vector<std::vector<std::vector<float>>> thread_floats_;
  std::vector<std::vector<std::vector<int32_t>>> thread_ints_;
  std::vector<std::vector<int32_t>> thread_vecs_;
  std::vector<std::vector<const float*>> thread_ptrs_;
  std::vector<std::vector<const uint8_t*>> thread_bytes_;
  layers::ExpertScratch experts_;
};

// Named workspace slots (each layer reuses the same ones: layers run one after another).
enum WsSlot : int {
  kWsX2 = 0, kWsMix, kWsPre, kWsPost, kWsComb, kWsSub, kWsSubOut, kWsQuant,
  kWsQr, kWsQ, kWsKv, kWsO, kWsR, kWsU, kWsS, kWsIdxQ, kWsIdxW, kWsScores, kWsKvDecoded,
  kWsGate, kWsRouteW, kWsHead, kWsQuant2, kWsIdxU, kWsIdxS, kWsLogits, kWsKvDecodedComp,
};
enum WsIntSlot : int { kWsiSel = 0, kWsiSelCount, kWsiRoute, kWsiSlotOf };

struct StepContext {
  const ModelShape* shape = nullptr;
  core::ThreadPool* pool = nullptr;
  Workspace* ws = nullptr;
  bool mtp = false;  // rows are MTP rows: every layer call uses the MTP block's state
  std::vector<RowInfo> rows;
  std::vector<SeqSlice> seqs;
  std::vector<float> rope[2];  // [kind][row][2·pairs]: cos then sin
  StageClock clock;            // `bench --breakdown`: a no-op unless the model has a profile attached

  int64_t n_rows() const { return static_cast<int64_t>(rows.size()); }
  LayerState& layer_state(int32_t seq, const LayerShape& ls) const {
    return seqs[seq].state->layer(mtp ? shape->n_layers : ls.id);
  }
  const float* cos(int kind, int64_t row) const {
    return rope[kind].data() + row * shape->rope_dim;
  }
  const float* sin(int kind, int64_t row) const { return cos(kind, row) + shape->rope_dim / 2; }
};

}  // namespace dsinfer::model::deepseek_v4
