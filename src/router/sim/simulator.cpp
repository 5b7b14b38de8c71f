#include "router/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "router/decode_balancer.h"

namespace dsinfer::router::sim {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

namespace {

constexpr size_t kNone = std::numeric_limits<size_t>::max();

enum class EventType { kArrival, kPrefillStepEnd, kHandoffDone, kDecodeStepEnd };

struct Event {
  int64_t time_ns;
  uint64_t seq;  // ties: the order the events were scheduled in, so the run is deterministic
  EventType type;
  size_t index;
  bool operator>(const Event& o) const { return time_ns != o.time_ns ? time_ns > o.time_ns : seq > o.seq; }
};

struct Request {
  const TraceRequest* trace = nullptr;
  int64_t arrival_ns = 0;
  int64_t first_token_ns = -1;
  int64_t prefill_done_ns = -1;
  int64_t placed_ns = -1;
  int64_t finish_ns = -1;
  int64_t generated = 0;  // output tokens so far (the first is the prefill's)
  int64_t reserved = 0;   // KV tokens reserved on the decode instance: prompt + output
  size_t decode = kNone;
};

struct PrefillInstance {
  std::deque<std::pair<size_t, int64_t>> held;  // (request, compute tokens left), FIFO
  bool stepping = false;
  int64_t step_start_ns = 0;
  int64_t step_tokens = 0;
  int64_t busy_ns = 0;  // closed steps
  int64_t busy_at_last_sample_ns = 0;
  int64_t busy_until(int64_t t) const { return busy_ns + (stepping ? t - step_start_ns : 0); }
};

struct DecodeInstance {
  std::vector<size_t> active, joining;
  bool stepping = false;
  int64_t step_start_ns = 0;
  int64_t busy_ns = 0;
  int64_t kv_tokens = 0;  // sequence lengths of the sequences that arrived (the balancer also counts those in transfer)
  int64_t steps = 0, concurrency_sum = 0;
};

class Simulation {
 public:
  Simulation(const std::vector<TraceRequest>& trace, const SimConfig& c)
      : config_(c), cost_(c.cost), prefill_balancer_(c.prefill), decode_balancer_(c.decode_count_weight) {
    DSINFER_CHECK(c.prefill_instances >= 1 && c.decode_instances >= 1, "simulate: need at least 1P and 1D");
    DSINFER_CHECK(c.sample_interval_s > 0, "simulate: the sample interval must be positive");
    prefill_.resize(static_cast<size_t>(c.prefill_instances));
    decode_.resize(static_cast<size_t>(c.decode_instances));
    for (int i = 0; i < c.decode_instances; ++i) {
      decode_balancer_.add_instance("d" + std::to_string(i), cost_.decode_max_requests,
                                    cost_.decode_kv_capacity_tokens);
    }
    requests_.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      requests_[i].trace = &trace[i];
      requests_[i].arrival_ns = static_cast<int64_t>(std::llround(trace[i].arrival_s * 1e9));
      schedule(requests_[i].arrival_ns, EventType::kArrival, i);
    }
    sample_interval_ns_ = std::max<int64_t>(1, static_cast<int64_t>(std::llround(c.sample_interval_s * 1e9)));
  }

  SimReport run() {
    if (!requests_.empty()) next_sample_ns_ = requests_.front().arrival_ns + sample_interval_ns_;
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      while (next_sample_ns_ <= e.time_ns) {
        sample(next_sample_ns_);
        next_sample_ns_ += sample_interval_ns_;
      }
      now_ = e.time_ns;
      ++report_.events;
      switch (e.type) {
        case EventType::kArrival: on_arrival(e.index); break;
        case EventType::kPrefillStepEnd: on_prefill_step_end(e.index); break;
        case EventType::kHandoffDone: on_handoff_done(e.index); break;
        case EventType::kDecodeStepEnd: on_decode_step_end(e.index); break;
      }
    }
    return finish_report();
  }

 private:
  void schedule(int64_t t, EventType type, size_t index) { events_.push({t, next_seq_++, type, index}); }

  void on_arrival(size_t r) {
    const TraceRequest& t = *requests_[r].trace;
    prefill_balancer_.enqueue({r, t.prompt_tokens, t.prompt_tokens - t.cached_tokens, now_});
    // Idle workers pull in turn, starting one further each arrival, so none is favoured at low load.
    const size_t n = prefill_.size();
    for (size_t k = 0; k < n; ++k) try_start_prefill((prefill_rotation_ + k) % n);
    prefill_rotation_ = (prefill_rotation_ + 1) % n;
  }

  void try_start_prefill(size_t p) {
    PrefillInstance& inst = prefill_[p];
    if (inst.stepping) return;
    const int64_t quota = cost_.prefill_step_tokens;
    int64_t held = 0;
    for (const auto& h : inst.held) held += h.second;
    if (held < quota && prefill_balancer_.queued() > 0) {
      for (const auto& job : prefill_balancer_.pull(quota - held, quota, now_)) {
        inst.held.emplace_back(static_cast<size_t>(job.id), job.compute_tokens);
        held += job.compute_tokens;
      }
    }
    if (held == 0) return;
    inst.stepping = true;
    inst.step_start_ns = now_;
    inst.step_tokens = std::min(quota, held);
    schedule(now_ + cost_.prefill_step_ns(inst.step_tokens), EventType::kPrefillStepEnd, p);
  }

  void on_prefill_step_end(size_t p) {
    PrefillInstance& inst = prefill_[p];
    int64_t tokens = inst.step_tokens;  // chunked prefill: the step's tokens go to the held jobs in order
    std::vector<size_t> done;
    while (tokens > 0 && !inst.held.empty()) {
      auto& [r, left] = inst.held.front();
      const int64_t used = std::min(tokens, left);
      left -= used;
      tokens -= used;
      if (left == 0) {
        done.push_back(r);
        inst.held.pop_front();
      }
    }
    inst.busy_ns += now_ - inst.step_start_ns;
    inst.stepping = false;
    for (size_t r : done) on_prefill_done(r);
    try_start_prefill(p);
  }

  void on_prefill_done(size_t r) {
    Request& req = requests_[r];
    req.first_token_ns = now_;
    req.prefill_done_ns = now_;
    req.generated = 1;
    if (req.trace->output_tokens == 1) {
      complete(r);
      return;
    }
    req.reserved = req.trace->prompt_tokens + req.trace->output_tokens;
    if (req.reserved > cost_.decode_kv_capacity_tokens) {
      ++report_.rejected;  // fits no instance even when empty
      return;
    }
    if (!waiting_.empty() || !try_place(r)) {  // FIFO: nobody passes a waiting sequence
      ++report_.decode_full_events;
      waiting_.push_back(r);
    }
  }

  std::optional<size_t> choose(int64_t kv_tokens, int64_t reserve_tokens) {
    if (config_.decode_policy == DecodePolicy::kBalanced) return decode_balancer_.choose(kv_tokens, reserve_tokens);
    const auto& d = decode_balancer_.instances();
    for (size_t k = 0; k < d.size(); ++k) {
      const size_t i = (decode_rotation_ + k) % d.size();
      if (d[i].requests + 1 <= d[i].max_requests && d[i].reserved_tokens + reserve_tokens <= d[i].kv_capacity_tokens) {
        decode_rotation_ = (i + 1) % d.size();
        return i;
      }
    }
    return std::nullopt;
  }

  bool try_place(size_t r) {
    Request& req = requests_[r];
    const int64_t held = req.trace->prompt_tokens + req.generated;
    const auto d = choose(held, req.reserved);
    if (!d) return false;
    decode_balancer_.place(*d, held, req.reserved);
    const auto& load = decode_balancer_.instances()[*d];
    report_.max_kv_share = std::max(report_.max_kv_share, static_cast<double>(load.reserved_tokens) /
                                                              static_cast<double>(load.kv_capacity_tokens));
    report_.max_request_share = std::max(report_.max_request_share, static_cast<double>(load.requests) /
                                                                        static_cast<double>(load.max_requests));
    req.decode = *d;
    req.placed_ns = now_;
    schedule(now_ + cost_.handoff_ns(req.trace->prompt_tokens), EventType::kHandoffDone, r);
    return true;
  }

  void on_handoff_done(size_t r) {
    Request& req = requests_[r];
    DecodeInstance& inst = decode_[req.decode];
    inst.joining.push_back(r);
    inst.kv_tokens += req.trace->prompt_tokens + req.generated;
    try_start_decode(req.decode);
  }

  void try_start_decode(size_t d) {
    DecodeInstance& inst = decode_[d];
    if (inst.stepping) return;
    inst.active.insert(inst.active.end(), inst.joining.begin(), inst.joining.end());
    inst.joining.clear();
    if (inst.active.empty()) return;
    const auto c = static_cast<int64_t>(inst.active.size());
    inst.stepping = true;
    inst.step_start_ns = now_;
    ++inst.steps;
    inst.concurrency_sum += c;
    schedule(now_ + cost_.decode_step_ns(c), EventType::kDecodeStepEnd, d);
  }

  void on_decode_step_end(size_t d) {
    DecodeInstance& inst = decode_[d];
    std::vector<size_t> still;
    for (size_t r : inst.active) {
      Request& req = requests_[r];
      ++req.generated;
      ++inst.kv_tokens;
      decode_balancer_.grow(d, 1);
      if (req.generated == req.trace->output_tokens) {
        inst.kv_tokens -= req.trace->prompt_tokens + req.generated;
        decode_balancer_.release(d, req.trace->prompt_tokens + req.generated, req.reserved);
        complete(r);
      } else {
        still.push_back(r);
      }
    }
    inst.active = std::move(still);
    inst.busy_ns += now_ - inst.step_start_ns;
    inst.stepping = false;
    while (!waiting_.empty() && try_place(waiting_.front())) waiting_.pop_front();
    try_start_decode(d);
  }

  void complete(size_t r) {
    requests_[r].finish_ns = now_;
    ++report_.completed;
  }

  void sample(int64_t t) {
    std::vector<double> busy, kv, count;
    for (auto& p : prefill_) {
      const int64_t b = p.busy_until(t);
      busy.push_back(static_cast<double>(b - p.busy_at_last_sample_ns));
      p.busy_at_last_sample_ns = b;
    }
    for (size_t i = 0; i < decode_.size(); ++i) {
      kv.push_back(static_cast<double>(decode_[i].kv_tokens));
      count.push_back(static_cast<double>(decode_[i].active.size() + decode_[i].joining.size()));
    }
    accumulate(busy, &prefill_mean_sum_, &prefill_max_sum_, &prefill_imbalances_);
    accumulate(kv, &kv_mean_sum_, &kv_max_sum_, &kv_imbalances_);
    std::vector<double> unused;
    accumulate(count, &count_mean_sum_, &count_max_sum_, &unused);
  }

  static void accumulate(const std::vector<double>& v, double* mean_sum, double* max_sum, std::vector<double>* ratios) {
    double sum = 0, max = 0;
    for (double x : v) {
      sum += x;
      max = std::max(max, x);
    }
    if (max <= 0) return;  // nothing to balance at this instant
    const double mean = sum / static_cast<double>(v.size());
    *mean_sum += mean;
    *max_sum += max;
    ratios->push_back(max / mean);
  }

  SimReport finish_report() {
    SimReport& r = report_;
    r.requests = static_cast<int64_t>(requests_.size());
    int64_t first = std::numeric_limits<int64_t>::max(), last = 0, output_tokens = 0;
    std::vector<double> ttft, tpot, wait;
    for (const auto& q : requests_) {
      first = std::min(first, q.arrival_ns);
      if (q.finish_ns < 0) continue;
      last = std::max(last, q.finish_ns);
      output_tokens += q.trace->output_tokens;
      ttft.push_back(static_cast<double>(q.first_token_ns - q.arrival_ns) * 1e-9);
      if (q.trace->output_tokens >= 2) {
        tpot.push_back(static_cast<double>(q.finish_ns - q.first_token_ns) * 1e-9 /
                       static_cast<double>(q.trace->output_tokens - 1));
        wait.push_back(static_cast<double>(q.placed_ns - q.prefill_done_ns) * 1e-9);
      }
    }
    DSINFER_CHECK_INTERNAL(r.completed + r.rejected == r.requests, "simulate: ", r.requests - r.completed - r.rejected,
                           " requests neither completed nor rejected");
    r.makespan_s = r.completed > 0 ? static_cast<double>(last - first) * 1e-9 : 0;
    if (r.makespan_s > 0) {
      r.output_tokens_per_s = static_cast<double>(output_tokens) / r.makespan_s;
      int64_t pb = 0, db = 0, steps = 0, conc = 0;
      for (const auto& p : prefill_) pb += p.busy_ns;
      for (const auto& d : decode_) {
        db += d.busy_ns;
        steps += d.steps;
        conc += d.concurrency_sum;
      }
      const double span_ns = r.makespan_s * 1e9;
      r.prefill_utilisation = static_cast<double>(pb) / (span_ns * static_cast<double>(prefill_.size()));
      r.decode_utilisation = static_cast<double>(db) / (span_ns * static_cast<double>(decode_.size()));
      r.mean_decode_concurrency = steps > 0 ? static_cast<double>(conc) / static_cast<double>(steps) : 0;
    }
    auto pct = [](const std::vector<double>& v) { return Percentiles{percentile(v, 50), percentile(v, 90), percentile(v, 99)}; };
    r.ttft_s = pct(ttft);
    r.tpot_s = pct(tpot);
    r.decode_wait_s = pct(wait);
    if (prefill_max_sum_ > 0) r.prefill_balance = prefill_mean_sum_ / prefill_max_sum_;
    if (kv_max_sum_ > 0) r.decode_kv_balance = kv_mean_sum_ / kv_max_sum_;
    if (count_max_sum_ > 0) r.decode_count_balance = count_mean_sum_ / count_max_sum_;
    auto mean_max = [](const std::vector<double>& v, double* mean, double* max) {
      if (v.empty()) return;
      double s = 0;
      for (double x : v) s += x;
      *mean = s / static_cast<double>(v.size());
      *max = *std::max_element(v.begin(), v.end());
    };
    mean_max(kv_imbalances_, &r.decode_kv_imbalance_mean, &r.decode_kv_imbalance_max);
    mean_max(prefill_imbalances_, &r.prefill_imbalance_mean, &r.prefill_imbalance_max);
    return r;
  }

  const SimConfig& config_;
  const CostModel& cost_;
  PrefillBalancer prefill_balancer_;
  DecodeBalancer decode_balancer_;
  std::vector<Request> requests_;
  std::vector<PrefillInstance> prefill_;
  std::vector<DecodeInstance> decode_;
  std::deque<size_t> waiting_;  // sequences done with prefill, waiting for decode room
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t next_seq_ = 0;
  int64_t now_ = 0;
  size_t prefill_rotation_ = 0, decode_rotation_ = 0;
  int64_t sample_interval_ns_ = 1;
  int64_t next_sample_ns_ = std::numeric_limits<int64_t>::max();
  double prefill_mean_sum_ = 0, prefill_max_sum_ = 0, kv_mean_sum_ = 0, kv_max_sum_ = 0, count_mean_sum_ = 0,
         count_max_sum_ = 0;
  std::vector<double> prefill_imbalances_, kv_imbalances_;
  SimReport report_;
};

}  // namespace

SimReport simulate(const std::vector<TraceRequest>& trace, const SimConfig& config) {
  for (size_t i = 1; i < trace.size(); ++i) {
    DSINFER_CHECK(trace[i].arrival_s >= trace[i - 1].arrival_s, "simulate: the trace is not sorted by arrival");
  }
  return Simulation(trace, config).run();
}

CapacityResult plan_capacity(const std::vector<TraceRequest>& trace, SimConfig config, const CapacityTarget& target) {
  DSINFER_CHECK(target.max_prefill >= 1 && target.max_decode >= 1, "capacity: instance limits must be >= 1");
  CapacityResult result;
  auto pct = [&](const Percentiles& p) {
    return target.percentile <= 50 ? p.p50 : target.percentile <= 90 ? p.p90 : p.p99;
  };
  auto run = [&](int p, int d) {
    config.prefill_instances = p;
    config.decode_instances = d;
    ++result.simulations;
    return simulate(trace, config);
  };
  auto ttft_ok = [&](const SimReport& r) { return r.rejected == 0 && pct(r.ttft_s) <= target.ttft_s; };
  auto both_ok = [&](const SimReport& r) { return ttft_ok(r) && pct(r.tpot_s) <= target.tpot_s; };
  // Smallest P in [1, max_prefill] meeting TTFT with the most decode instances.
  int lo = 1, hi = target.max_prefill;
  if (!ttft_ok(run(hi, target.max_decode))) return result;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (ttft_ok(run(mid, target.max_decode))) hi = mid; else lo = mid + 1;
  }
  const int p = lo;
  lo = 1;
  hi = target.max_decode;
  if (!both_ok(run(p, hi))) return result;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (both_ok(run(p, mid))) hi = mid; else lo = mid + 1;
  }
  result.met = true;
  result.prefill_instances = p;
  result.decode_instances = lo;
  result.report = run(p, lo);
  return result;
}

std::string report_text(const SimReport& r) {
  char buf[2048];
  std::snprintf(buf, sizeof(buf),
                "requests %lld  completed %lld  rejected %lld  makespan %.3f s  output %.1f tok/s\n"
                "TTFT  p50 %.4f  p90 %.4f  p99 %.4f s\n"
                "TPOT  p50 %.5f  p90 %.5f  p99 %.5f s\n"
                "decode wait (cluster full)  p50 %.4f  p90 %.4f  p99 %.4f s  refusals %lld\n"
                "utilisation  prefill %.1f%%  decode %.1f%%  mean decode concurrency %.1f\n"
                "balance vs perfect  prefill %.1f%%  decode KV %.1f%%  decode count %.1f%%\n"
                "imbalance max/mean  prefill mean %.3f worst %.3f  decode KV mean %.3f worst %.3f\n"
                "peak decode share  KV %.3f  requests %.3f\n",
                static_cast<long long>(r.requests), static_cast<long long>(r.completed),
                static_cast<long long>(r.rejected), r.makespan_s, r.output_tokens_per_s, r.ttft_s.p50, r.ttft_s.p90,
                r.ttft_s.p99, r.tpot_s.p50, r.tpot_s.p90, r.tpot_s.p99, r.decode_wait_s.p50, r.decode_wait_s.p90,
                r.decode_wait_s.p99, static_cast<long long>(r.decode_full_events), 100 * r.prefill_utilisation,
                100 * r.decode_utilisation, r.mean_decode_concurrency, 100 * r.prefill_balance,
                100 * r.decode_kv_balance, 100 * r.decode_count_balance, r.prefill_imbalance_mean,
                r.prefill_imbalance_max, r.decode_kv_imbalance_mean, r.decode_kv_imbalance_max, r.max_kv_share,
                r.max_request_share);
  return buf;
}

std::string report_json(const SimReport& r) {
  auto pct = [](const Percentiles& p) { return nlohmann::json{{"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}}; };
  nlohmann::json j = {{"requests", r.requests},
                      {"completed", r.completed},
                      {"rejected", r.rejected},
                      {"makespan_s", r.makespan_s},
                      {"output_tokens_per_s", r.output_tokens_per_s},
                      {"ttft_s", pct(r.ttft_s)},
                      {"tpot_s", pct(r.tpot_s)},
                      {"decode_wait_s", pct(r.decode_wait_s)},
                      {"decode_full_events", r.decode_full_events},
                      {"prefill_utilisation", r.prefill_utilisation},
                      {"decode_utilisation", r.decode_utilisation},
                      {"mean_decode_concurrency", r.mean_decode_concurrency},
                      {"prefill_balance", r.prefill_balance},
                      {"decode_kv_balance", r.decode_kv_balance},
                      {"decode_count_balance", r.decode_count_balance},
                      {"prefill_imbalance", {{"mean", r.prefill_imbalance_mean}, {"max", r.prefill_imbalance_max}}},
                      {"decode_kv_imbalance", {{"mean", r.decode_kv_imbalance_mean}, {"max", r.decode_kv_imbalance_max}}},
                      {"max_kv_share", r.max_kv_share},
                      {"max_request_share", r.max_request_share},
                      {"events", r.events}};
  return j.dump(2);
}

}  // namespace dsinfer::router::sim
