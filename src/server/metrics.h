// Prometheus text exposition (format 0.0.4): counter and histogram families with labels, updated from
// any thread, plus gauges and counters read at scrape time through a collector callback (the engine's
// metrics, connection counts).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dsinfer::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Appends families in the text format; used by the registry and by collectors.
class PromWriter {
 public:
  void family(const std::string& name, const std::string& type, const std::string& help);
  void sample(const std::string& name, const Labels& labels, double value);
  // A one-sample family.
  void gauge(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  void counter(const std::string& name, const std::string& help, double value, const Labels& labels = {});
  const std::string& text() const { return out_; }

 private:
  std::string out_;
};

class CounterFamily {
 public:
  CounterFamily(std::string name, std::string help) : name_(std::move(name)), help_(std::move(help)) {}
  void add(const Labels& labels, double value = 1.0);
  double value(const Labels& labels) const;
  void write(PromWriter& out) const;

 private:
  std::string name_, help_;
  mutable std::mutex mu_;
  std::map<Labels, double> values_;
};

class HistogramFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<double> upper_bounds);
  void observe(const Labels& labels, double value);
  uint64_t count(const Labels& labels) const;
  void write(PromWriter& out) const;

 private:
  struct Series {
    std::vector<uint64_t> buckets;  // not cumulative; one per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  std::string name_, help_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<Labels, Series> series_;
};

// Bucket bounds for latencies in seconds, from 1 ms to 10 min.
std::vector<double> latency_buckets();

class MetricsRegistry {
 public:
  CounterFamily& counter(const std::string& name, const std::string& help);
  HistogramFamily& histogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  void add_collector(std::function<void(PromWriter&)> collector);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CounterFamily>> counters_;
  std::vector<std::unique_ptr<HistogramFamily>> histograms_;
  std::vector<std::function<void(PromWriter&)>> collectors_;
};

}  // namespace dsinfer::server
