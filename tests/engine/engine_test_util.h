// Helpers for engine tests: run requests through an Engine and collect what each one produced, and
// compute what a request must produce from a model's logits without the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "toy_model.h"

namespace dsinfer::engine::testing {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // with SamplingParams::top_logprobs >= 0
  FinishReason finish = FinishReason::kNone;
  int32_t stop = -1;
  int64_t cached = 0;
  int64_t prompt = 0;
  int events = 0;
  std::string error;
  SubmitStatus status = SubmitStatus::kAccepted;
};

class Collector {
 public:
  TokenCallback callback(size_t index) {
    return [this, index](const TokenEvent& e) {
      std::lock_guard<std::mutex> lock(mu_);
      Outcome& o = outcomes_[index];
      o.tokens.insert(o.tokens.end(), e.tokens.begin(), e.tokens.end());
      o.logprobs.insert(o.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      ++o.events;
      o.cached = e.cached_tokens;
      o.prompt = e.prompt_tokens;
      if (e.finish != FinishReason::kNone) {
        o.finish = e.finish;
        o.stop = e.matched_stop_token;
        o.error = e.error;
        ++done_;
        cv_.notify_all();
      }
    };
  }
  void expect(size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    expected_ += n;
  }
  void rejected(size_t index, SubmitStatus s) {
    std::lock_guard<std::mutex> lock(mu_);
    outcomes_[index].status = s;
    ++done_;
    cv_.notify_all();
  }
  // Waits (at most 60 s) until every expected request finished.
  bool wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_ >= expected_; });
  }
  Outcome get(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    return outcomes_[index];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<size_t, Outcome> outcomes_;
  size_t done_ = 0, expected_ = 0;
};

// Submits every spec (in `order`, sleeping `gap_us` between submissions) and waits for all.
inline std::vector<Outcome> run_all(Engine& engine, const std::vector<RequestSpec>& specs,
                                    std::vector<size_t> order = {}, int gap_us = 0,
                                    const std::function<void()>& after_submit = {}) {
  if (order.empty()) {
    for (size_t i = 0; i < specs.size(); ++i) order.push_back(i);
  }
  Collector c;
  c.expect(specs.size());
  for (size_t i : order) {
    SubmitResult r = engine.submit(specs[i], c.callback(i));
    if (r.status != SubmitStatus::kAccepted) c.rejected(i, r.status);
    if (gap_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
  }
  if (after_submit) after_submit();
  std::vector<Outcome> out;
  if (!c.wait()) {
    engine.shutdown(false);  // the callbacks must not outlive the collector
    return out;
  }
  for (size_t i = 0; i < specs.size(); ++i) out.push_back(c.get(i));
  return out;
}

// Holds a ToyModel's forward passes until release(): the whole workload is queued before the first
// step runs, so the schedule's contention is the same on every run.
class ForwardGate {
 public:
  explicit ForwardGate(ToyModel& model) : open_(promise_.get_future().share()) {
    model.before_forward = [open = open_] { open.wait(); };
  }
  ~ForwardGate() { release(); }
  void release() {
    if (!released_) promise_.set_value();
    released_ = true;
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> open_;
  bool released_ = false;
};

// What a request must produce without speculation: each token drawn from the model's logits for the
// whole prefix, with the request's stream at that token's position (stop tokens end it, excluded).
inline Outcome expected_outcome(ToyModel& model, const RequestSpec& spec, int32_t eos) {
  Outcome o;
  std::vector<int32_t> tokens = spec.prompt_ids;
  TokenStream stream(spec.sampling.seed, spec.sampling.stream_key);
  for (int32_t i = 0; i < spec.max_tokens; ++i) {
    const std::vector<float> logits = model.reference_logits(tokens);
    const int32_t t = sample_token(logits, spec.sampling, stream, static_cast<int64_t>(tokens.size()));
    bool stop = (!spec.ignore_eos && t == eos);
    for (int32_t s : spec.stop_token_ids) stop |= t == s;
    if (stop) {
      o.finish = FinishReason::kStop;
      o.stop = t;
      return o;
    }
    tokens.push_back(t);
    o.tokens.push_back(t);
  }
  o.finish = FinishReason::kLength;
  return o;
}

// A request of exactly `max_tokens` tokens (EOS ignored): greedy, or sampled at `temperature` with
// top-k 50 and `seed`.
inline RequestSpec fixed_length_spec(std::vector<int32_t> prompt, int max_tokens, float temperature = 0,
                                     uint64_t seed = 0) {
  RequestSpec s;
  s.prompt_ids = std::move(prompt);
  s.max_tokens = max_tokens;
  s.sampling.temperature = temperature;
  s.sampling.seed = seed;
  s.sampling.top_k = temperature > 0 ? 50 : 0;
  s.ignore_eos = true;
  return s;
}

}  // namespace dsinfer::engine::testing
