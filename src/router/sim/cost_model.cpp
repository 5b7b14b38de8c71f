#include "router/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace dsinfer::router::sim {

Curve::Curve(std::vector<std::pair<double, double>> points, const std::string& what) : points_(std::move(points)) {
  DSINFER_CHECK(!points_.empty(), what, ": a curve needs at least one point");
  for (size_t i = 0; i < points_.size(); ++i) {
    DSINFER_CHECK(points_[i].second > 0 && std::isfinite(points_[i].second), what, ": rates must be positive");
    DSINFER_CHECK(i == 0 || points_[i].first > points_[i - 1].first, what, ": points must ascend in x");
  }
}

double Curve::at(double x) const {
  DSINFER_CHECK_INTERNAL(!points_.empty(), "empty cost curve");
  if (x <= points_.front().first) return points_.front().second;
  if (x >= points_.back().first) return points_.back().second;
  const auto hi = std::upper_bound(points_.begin(), points_.end(), x,
                                   [](double v, const std::pair<double, double>& p) { return v < p.first; });
  const auto lo = hi - 1;
  const double f = (x - lo->first) / (hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

namespace {

int64_t seconds_to_ns(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

}  // namespace

int64_t CostModel::prefill_step_ns(int64_t tokens) const {
  return seconds_to_ns(static_cast<double>(tokens) / prefill_tokens_per_s.at(static_cast<double>(tokens)));
}

int64_t CostModel::decode_step_ns(int64_t concurrency) const {
  return seconds_to_ns(static_cast<double>(concurrency) / decode_tokens_per_s.at(static_cast<double>(concurrency)));
}

int64_t CostModel::handoff_ns(int64_t tokens) const {
  return seconds_to_ns(handoff_latency_s + static_cast<double>(tokens) * handoff_bytes_per_token / handoff_bytes_per_s);
}

CostModel default_cost_model() {
  // Placeholders of a plausible shape (prefill saturates with batch tokens, decode throughput grows
  // sublinearly with concurrency), not measurements: replace them with `dsinfer bench` numbers.
  CostModel m;
  m.prefill_tokens_per_s = Curve({{512, 3000}, {2048, 9000}, {8192, 16000}, {32768, 18000}}, "default prefill");
  m.decode_tokens_per_s = Curve({{1, 40}, {8, 280}, {32, 800}, {128, 1800}}, "default decode");
  return m;
}

namespace {

Curve read_curve(const nlohmann::json& j, const std::string& what) {
  DSINFER_CHECK(j.is_array(), what, ": expected an array of [x, tokens_per_s] pairs");
  std::vector<std::pair<double, double>> points;
  for (const auto& p : j) {
    DSINFER_CHECK(p.is_array() && p.size() == 2 && p[0].is_number() && p[1].is_number(), what,
                  ": expected [x, tokens_per_s] pairs");
    points.emplace_back(p[0].get<double>(), p[1].get<double>());
  }
  return Curve(std::move(points), what);
}

nlohmann::json curve_json(const Curve& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& [x, y] : c.points()) a.push_back({x, y});
  return a;
}

}  // namespace

CostModel read_cost_model(const std::string& json_text, const std::string& name) {
  const auto j = nlohmann::json::parse(json_text, nullptr, false);
  DSINFER_CHECK(j.is_object(), name, ": not a JSON object");
  CostModel m = default_cost_model();
  try {
    if (j.contains("prefill")) {
      const auto& p = j["prefill"];
      m.prefill_step_tokens = p.value("step_tokens", m.prefill_step_tokens);
      if (p.contains("tokens_per_s")) m.prefill_tokens_per_s = read_curve(p["tokens_per_s"], name + ": prefill");
    }
    if (j.contains("decode")) {
      const auto& d = j["decode"];
      m.decode_max_requests = d.value("max_requests", m.decode_max_requests);
      m.decode_kv_capacity_tokens = d.value("kv_capacity_tokens", m.decode_kv_capacity_tokens);
      if (d.contains("tokens_per_s")) m.decode_tokens_per_s = read_curve(d["tokens_per_s"], name + ": decode");
    }
    if (j.contains("handoff")) {
      const auto& h = j["handoff"];
      m.handoff_bytes_per_token = h.value("bytes_per_token", m.handoff_bytes_per_token);
      m.handoff_bytes_per_s = h.value("bytes_per_s", m.handoff_bytes_per_s);
      m.handoff_latency_s = h.value("latency_s", m.handoff_latency_s);
    }
  } catch (const nlohmann::json::exception& e) {
    core::fail(name, ": ", e.what());
  }
  DSINFER_CHECK(m.prefill_step_tokens >= 1 && m.decode_max_requests >= 1 && m.decode_kv_capacity_tokens >= 1, name,
                ": step tokens, max requests and KV capacity must be positive");
  DSINFER_CHECK(m.handoff_bytes_per_token >= 0 && m.handoff_bytes_per_s > 0 && m.handoff_latency_s >= 0, name,
                ": handoff costs must be non-negative and the bandwidth positive");
  return m;
}

CostModel read_cost_model_file(const std::string& path) {
  std::ifstream in(path);
  DSINFER_CHECK(in.good(), "cannot open cost curves ", path);
  std::stringstream s;
  s << in.rdbuf();
  return read_cost_model(s.str(), path);
}

std::string cost_model_json(const CostModel& m) {
  nlohmann::json j = {
      {"prefill", {{"step_tokens", m.prefill_step_tokens}, {"tokens_per_s", curve_json(m.prefill_tokens_per_s)}}},
      {"decode",
       {{"max_requests", m.decode_max_requests},
        {"kv_capacity_tokens", m.decode_kv_capacity_tokens},
        {"tokens_per_s", curve_json(m.decode_tokens_per_s)}}},
      {"handoff",
       {{"bytes_per_token", m.handoff_bytes_per_token},
        {"bytes_per_s", m.handoff_bytes_per_s},
        {"latency_s", m.handoff_latency_s}}}};
  return j.dump(2);
}

}  // namespace dsinfer::router::sim
