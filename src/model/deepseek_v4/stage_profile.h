// Wall time and parallel regions of a forward step, by stage (`dsinfer bench --breakdown`). The model
// marks where a stage starts; the time and the pool's regions since the previous mark go to the stage
// that was running. With no profile attached a mark is one branch, so the marks stay in the code.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace dsinfer::model::deepseek_v4 {

enum class Stage : int {
  kMhc = 0,       // hyper-connection mixes, combine, norm, expand
  kAttnProducts,  // the attention's products (queries, KV, compressor and indexer inputs, output) and their glue,
                  // with the window KV rows decoded inside the query products' region
  kCompressor,    // compressed entries and the indexer's selection (no weight products)
  kAttnCore,      // compressed KV entries decoded and the sink-softmax core
  kFfn,           // router, shared and routed experts
  kHead,          // hc head, final norm, lm head
  kOther,         // embedding, RoPE angles, state bookkeeping
  kCount,
};

inline const char* stage_name(Stage s) {
  static constexpr const char* kNames[] = {"mHC/norms", "attention products", "compressor+indexer",
                                           "attention core", "FFN (router+experts)", "head", "other"};
  return kNames[static_cast<int>(s)];
}

// Kept per step, so that a shared machine's preempted steps can be told apart: the least disturbed
// step of each stage is the cleaner signal there.
struct StageProfile {
  using Times = std::array<double, static_cast<int>(Stage::kCount)>;
  Times pending{};         // the step in progress
  Times pending_serial{};  // of which outside parallel regions (one thread working)
  std::vector<Times> steps, serial;
  std::array<uint64_t, static_cast<int>(Stage::kCount)> regions{};  // over all steps
  void end_step() {
    steps.push_back(pending);
    serial.push_back(pending_serial);
    pending = {};
    pending_serial = {};
  }
};

// Charges the span since the last mark to the stage that ran in it.
class StageClock {
 public:
  using Clock = std::chrono::steady_clock;
  StageClock() = default;
  StageClock(StageProfile* profile, const core::ThreadPool* pool) : profile_(profile), pool_(pool) {
    if (profile_ == nullptr) return;
    last_ = Clock::now();
    regions_ = pool_->regions();
    region_ns_ = pool_->region_ns();
  }
  void enter(Stage next) {
    if (profile_ == nullptr) return;
    const auto now = Clock::now();
    const uint64_t regions = pool_->regions(), region_ns = pool_->region_ns();
    const int i = static_cast<int>(current_);
    const double span = std::chrono::duration<double>(now - last_).count();
    profile_->pending[i] += span;
    profile_->pending_serial[i] += span - static_cast<double>(region_ns - region_ns_) * 1e-9;
    profile_->regions[i] += regions - regions_;
    last_ = now;
    regions_ = regions;
    region_ns_ = region_ns;
    current_ = next;
  }
  Stage current() const { return current_; }

 private:
  StageProfile* profile_ = nullptr;
  const core::ThreadPool* pool_ = nullptr;
  Clock::time_point last_{};
  uint64_t regions_ = 0;
  uint64_t region_ns_ = 0;
  Stage current_ = Stage::kOther;
};

}  // namespace dsinfer::model::deepseek_v4
