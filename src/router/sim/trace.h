// Request traces for the simulator: a JSONL file (one request per line, README.md "Trace format") or the
// built-in generator. Arrival times are in seconds from the start of the trace.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace dsinfer::router::sim {

struct TraceRequest {
  double arrival_s = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // >= 1: the first comes from the prefill instance
  int64_t cached_tokens = 0;  // prefix found in the shared KV store: not computed again (< prompt_tokens)
};

// Reads a JSONL trace; fails naming the line of a bad record. The requests come back sorted by arrival
// (stable: equal arrivals keep the file's order).
std::vector<TraceRequest> read_trace(std::istream& in, const std::string& name);
std::vector<TraceRequest> read_trace_file(const std::string& path);
void write_trace(std::ostream& out, const std::vector<TraceRequest>& trace);

struct TraceGenerator {
  int64_t requests = 1000;
  double rate = 10;                  // mean arrivals per second (Poisson)
  double prompt_mean = 8192;         // log-normal prompt length: mean tokens ...
  double prompt_sigma = 1.0;         // ... and sigma of the underlying normal
  int64_t prompt_max = 1 << 20;
  double output_mean = 512;          // log-normal output length
  double output_sigma = 0.8;
  int64_t output_max = 32768;
  double reuse_share = 0.5;          // share of requests that continue an earlier conversation ...
  double reuse_ratio = 0.9;          // ... and find this share of their prompt in the KV store
  uint64_t seed = 1;
};

// Deterministic for a seed: the generator draws from its own PRNG (splitmix64), not from <random>'s
// distributions, whose algorithms differ between standard libraries.
std::vector<TraceRequest> generate_trace(const TraceGenerator& g);

}  // namespace dsinfer::router::sim
