#include "server/metrics.h"

#include <gtest/gtest.h>

namespace dsinfer::server {
namespace {

TEST(Metrics, CounterWithLabelsAndEscaping) {
  MetricsRegistry reg;
  auto& c = reg.counter("dsinfer_x_total", "Things.");
  c.add({{"route", "/v1/a"}, {"code", "200"}});
  c.add({{"route", "/v1/a"}, {"code", "200"}}, 2);
  c.add({{"route", "q\"uote\\"}});
  EXPECT_EQ(c.value({{"route", "/v1/a"}, {"code", "200"}}), 3);
  EXPECT_EQ(reg.render(),
            "# HELP dsinfer_x_total Things.\n# TYPE dsinfer_x_total counter\n"
            "dsinfer_x_total{route=\"/v1/a\",code=\"200\"} 3\n"
            "dsinfer_x_total{route=\"q\\\"uote\\\\\"} 1\n");
}

TEST(Metrics, EmptyCounterShowsZero) {
  MetricsRegistry reg;
  reg.counter("dsinfer_y_total", "Y.");
  EXPECT_EQ(reg.render(), "# HELP dsinfer_y_total Y.\n# TYPE dsinfer_y_total counter\ndsinfer_y_total 0\n");
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  MetricsRegistry reg;
  auto& h = reg.histogram("lat_seconds", "Latency.", {0.1, 1});
  h.observe({}, 0.05);
  h.observe({}, 0.1);   // on the bound: le is inclusive
  h.observe({}, 0.5);
  h.observe({}, 7);
  EXPECT_EQ(h.count({}), 4u);
  EXPECT_EQ(reg.render(),
            "# HELP lat_seconds Latency.\n# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.1\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum 7.65\n"
            "lat_seconds_count 4\n");
}

TEST(Metrics, CollectorsAppendAtScrapeTime) {
  MetricsRegistry reg;
  int calls = 0;
  reg.add_collector([&](PromWriter& w) { w.gauge("g", "A gauge.", ++calls, {{"k", "v"}}); });
  EXPECT_EQ(reg.render(), "# HELP g A gauge.\n# TYPE g gauge\ng{k=\"v\"} 1\n");
  EXPECT_EQ(reg.render(), "# HELP g A gauge.\n# TYPE g gauge\ng{k=\"v\"} 2\n");
}

}  // namespace
}  // namespace dsinfer::server
