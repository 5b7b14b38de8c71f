#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace dsinfer::server {
namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

}  // namespace

void PromWriter::family(const std::string& name, const std::string& type, const std::string& help) {
  out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void PromWriter::sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first + "=\"" + escape_label(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + format_value(value) + '\n';
}

void PromWriter::gauge(const std::string& name, const std::string& help, double value, const Labels& labels) {
  family(name, "gauge", help);
  sample(name, labels, value);
}

void PromWriter::counter(const std::string& name, const std::string& help, double value, const Labels& labels) {
  family(name, "counter", help);
  sample(name, labels, value);
}

void CounterFamily::add(const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  values_[labels] += value;
}

double CounterFamily::value(const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0.0 : it->second;
}

void CounterFamily::write(PromWriter& out) const {
  std::lock_guard lock(mu_);
  out.family(name_, "counter", help_);
  if (values_.empty()) out.sample(name_, {}, 0);  // an unlabelled zero so the family is visible
  for (const auto& [labels, v] : values_) out.sample(name_, labels, v);
}

HistogramFamily::HistogramFamily(std::string name, std::string help, std::vector<double> upper_bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(upper_bounds)) {}

void HistogramFamily::observe(const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  Series& s = series_[labels];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size() + 1, 0);
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++s.buckets[i];
  s.sum += value;
  ++s.count;
}

uint64_t HistogramFamily::count(const Labels& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

void HistogramFamily::write(PromWriter& out) const {
  std::lock_guard lock(mu_);
  out.family(name_, "histogram", help_);
  for (const auto& [labels, s] : series_) {
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
      cumulative += s.buckets[i];
      Labels l = labels;
      l.emplace_back("le", i < bounds_.size() ? format_value(bounds_[i]) : "+Inf");
      out.sample(name_ + "_bucket", l, static_cast<double>(cumulative));
    }
    out.sample(name_ + "_sum", labels, s.sum);
    out.sample(name_ + "_count", labels, static_cast<double>(s.count));
  }
}

std::vector<double> latency_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
}

CounterFamily& MetricsRegistry::counter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  counters_.push_back(std::make_unique<CounterFamily>(name, help));
  return *counters_.back();
}

HistogramFamily& MetricsRegistry::histogram(const std::string& name, const std::string& help,
                                            std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  histograms_.push_back(std::make_unique<HistogramFamily>(name, help, std::move(bounds)));
  return *histograms_.back();
}

void MetricsRegistry::add_collector(std::function<void(PromWriter&)> collector) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mu_);
  PromWriter out;
  for (const auto& c : counters_) c->write(out);
  for (const auto& h : histograms_) h->write(out);
  for (const auto& fn : collectors_) fn(out);
  return out.text();
}

}  // namespace dsinfer::server
