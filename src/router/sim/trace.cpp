#include "router/sim/trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "core/error.h"

namespace dsinfer::router::sim {

std::vector<TraceRequest> read_trace(std::istream& in, const std::string& name) {
  std::vector<TraceRequest> trace;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    DSINFER_CHECK(j.is_object(), name, ":", line_no, ": not a JSON object");
    TraceRequest r;
    try {
      r.arrival_s = j.at("arrival_s").get<double>();
      r.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
      r.output_tokens = j.at("output_tokens").get<int64_t>();
      r.cached_tokens = j.value("cached_tokens", int64_t{0});
    } catch (const nlohmann::json::exception& e) {
      core::fail(name, ":", line_no, ": ", e.what());
    }
    DSINFER_CHECK(std::isfinite(r.arrival_s) && r.arrival_s >= 0, name, ":", line_no, ": arrival_s must be >= 0");
    DSINFER_CHECK(r.prompt_tokens >= 1 && r.output_tokens >= 1, name, ":", line_no,
                  ": prompt_tokens and output_tokens must be >= 1");
    DSINFER_CHECK(r.cached_tokens >= 0 && r.cached_tokens < r.prompt_tokens, name, ":", line_no,
                  ": cached_tokens must be in [0, prompt_tokens)");
    trace.push_back(r);
  }
  std::stable_sort(trace.begin(), trace.end(),
                   [](const TraceRequest& a, const TraceRequest& b) { return a.arrival_s < b.arrival_s; });
  return trace;
}

std::vector<TraceRequest> read_trace_file(const std::string& path) {
  std::ifstream in(path);
  DSINFER_CHECK(in.good(), "cannot open trace ", path);
  return read_trace(in, path);
}

void write_trace(std::ostream& out, const std::vector<TraceRequest>& trace) {
  for (const auto& r : trace) {
    nlohmann::json j = {{"arrival_s", r.arrival_s},
                        {"prompt_tokens", r.prompt_tokens},
                        {"output_tokens", r.output_tokens},
                        {"cached_tokens", r.cached_tokens}};
    out << j.dump() << '\n';
  }
}

namespace {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {  // Box-Muller, one value per call
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

// A log-normal value with the given mean (not median): mu = ln(mean) - sigma²/2.
int64_t lognormal(SplitMix64& rng, double mean, double sigma, int64_t max) {
  const double mu = std::log(mean) - sigma * sigma / 2;
  const double v = std::exp(mu + sigma * rng.normal());
  return std::clamp<int64_t>(std::llround(v), 1, max);
}

}  // namespace

std::vector<TraceRequest> generate_trace(const TraceGenerator& g) {
  DSINFER_CHECK(g.requests >= 0 && g.rate > 0 && g.prompt_mean >= 1 && g.output_mean >= 1 && g.prompt_sigma >= 0 &&
                    g.output_sigma >= 0 && g.prompt_max >= 1 && g.output_max >= 1,
                "trace generator: counts, rate and means must be positive");
  DSINFER_CHECK(g.reuse_share >= 0 && g.reuse_share <= 1 && g.reuse_ratio >= 0 && g.reuse_ratio < 1,
                "trace generator: reuse share must be in [0, 1] and reuse ratio in [0, 1)");
  SplitMix64 rng{g.seed};
  std::vector<TraceRequest> trace;
  trace.reserve(static_cast<size_t>(g.requests));
  double t = 0;
  for (int64_t i = 0; i < g.requests; ++i) {
    t += -std::log(rng.uniform()) / g.rate;
    TraceRequest r;
    r.arrival_s = t;
    r.prompt_tokens = lognormal(rng, g.prompt_mean, g.prompt_sigma, g.prompt_max);
    r.output_tokens = lognormal(rng, g.output_mean, g.output_sigma, g.output_max);
    if (rng.uniform() < g.reuse_share) {
      r.cached_tokens = std::min<int64_t>(r.prompt_tokens - 1, static_cast<int64_t>(r.prompt_tokens * g.reuse_ratio));
    }
    trace.push_back(r);
  }
  return trace;
}

}  // namespace dsinfer::router::sim
