#include "common/metrics.h"

#include <gtest/gtest.h>

namespace kubicle::metrics {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndHistograms) {
  Registry reg;
  auto& c = reg.AddCounter("kubicle_test_total", "Things.\nSecond line", {"kind"});
  c.WithLabels({"Sandbox"}).Inc();
  c.WithLabels({"Sandbox"}).Inc(2);
  c.WithLabels({"Sandbox"}).Inc(-5);  // counters never go down
  reg.AddGauge("kubicle_depth", "Depth.").WithLabels({}).Set(7);
  auto& h = reg.AddHistogram("kubicle_latency_seconds", "Latency.", {}, {0.1, 1});
  h.WithLabels({}).Observe(0.05);
  h.WithLabels({}).Observe(0.1);  // le is inclusive
  h.WithLabels({}).Observe(5);
  EXPECT_EQ(reg.Render(),
            "# HELP kubicle_test_total Things.\\nSecond line\n"
            "# TYPE kubicle_test_total counter\n"
            "kubicle_test_total{kind=\"Sandbox\"} 3\n"
            "# HELP kubicle_depth Depth.\n"
            "# TYPE kubicle_depth gauge\n"
            "kubicle_depth 7\n"
            "# HELP kubicle_latency_seconds Latency.\n"
            "# TYPE kubicle_latency_seconds histogram\n"
            "kubicle_latency_seconds_bucket{le=\"0.10000000000000001\"} 2\n"
            "kubicle_latency_seconds_bucket{le=\"1\"} 2\n"
            "kubicle_latency_seconds_bucket{le=\"+Inf\"} 3\n"
            "kubicle_latency_seconds_sum 5.1500000000000004\n"
            "kubicle_latency_seconds_count 3\n");
}

TEST(MetricsTest, EscapesLabelValuesAndRunsCallbacks) {
  Registry reg;
  reg.AddGaugeCallback("kubicle_sandboxes", "By phase.", {"phase"}, [] {
    return std::vector<std::pair<LabelValues, double>>{{{"Run\"ning\\\n"}, 2}};
  });
  EXPECT_NE(reg.Render().find("kubicle_sandboxes{phase=\"Run\\\"ning\\\\\\n\"} 2\n"),
            std::string::npos);
}

TEST(MetricsTest, NameGrammar) {
  EXPECT_TRUE(ValidMetricName("kubicle_restore_seconds"));
  EXPECT_FALSE(ValidMetricName("1abc"));
  EXPECT_FALSE(ValidMetricName("a-b"));
  EXPECT_TRUE(ValidLabelName("phase"));
  EXPECT_FALSE(ValidLabelName("__reserved"));
  EXPECT_EQ(FormatValue(1.0 / 0.0), "+Inf");
}

}  // namespace
}  // namespace kubicle::metrics
