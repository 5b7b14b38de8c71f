// Per-instance cost curves for the simulator: how fast one prefill instance computes a step of B tokens,
// and how fast one decode instance generates at concurrency C. Measured by `dsinfer bench` on real
// hardware; the defaults are placeholders (README.md "Cost curves") until then.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::router::sim {

// Piecewise-linear y(x) through points sorted by x; constant beyond the first and last point.
class Curve {
 public:
  Curve() = default;
  explicit Curve(std::vector<std::pair<double, double>> points, const std::string& what);
  double at(double x) const;
  const std::vector<std::pair<double, double>>& points() const { return points_; }

 private:
  std::vector<std::pair<double, double>> points_;
};

struct CostModel {
  // Prefill: tokens per step (the quota a worker pulls against) and tokens/s vs the step's token count.
  int64_t prefill_step_tokens = 8192;
  Curve prefill_tokens_per_s;
  // Decode: the instance's limits, and its total tokens/s (over all sequences) vs concurrency.
  int64_t decode_max_requests = 128;
  int64_t decode_kv_capacity_tokens = 4 * 1024 * 1024;
  Curve decode_tokens_per_s;
  // KV handoff from prefill to decode: latency + bytes / bandwidth.
  double handoff_bytes_per_token = 2048;
  double handoff_bytes_per_s = 10e9;
  double handoff_latency_s = 0.0005;

  // Nanoseconds for a prefill step of `tokens`, a decode step at `concurrency`, a handoff of `tokens`.
  int64_t prefill_step_ns(int64_t tokens) const;
  int64_t decode_step_ns(int64_t concurrency) const;
  int64_t handoff_ns(int64_t tokens) const;
};

CostModel default_cost_model();
// Reads the JSON format of README.md "Cost curves"; missing fields keep the defaults.
CostModel read_cost_model(const std::string& json_text, const std::string& name);
CostModel read_cost_model_file(const std::string& path);
std::string cost_model_json(const CostModel& m);

}  // namespace dsinfer::router::sim
