// Prints a registry with every kind of series, for metrics_parse_test.py,
// which checks the exposition with the reference parser (prometheus_client).
#include <iostream>

#include "common/metrics.h"

int main() {
  kubicle::metrics::Registry reg;
  auto& c = reg.AddCounter("kubicle_dump_events_total", "Events with \"quotes\" and \\.", {"kind"});
  c.WithLabels({"a\"b\\c\nd"}).Inc(3);
  reg.AddGauge("kubicle_dump_depth", "Queue depth.").WithLabels({}).Set(-2.5);
  auto& h = reg.AddHistogram("kubicle_dump_latency_seconds", "Latency.", {"kind"},
                             kubicle::metrics::ExponentialBuckets(0.001, 10, 4));
  for (double v : {0.0005, 0.02, 0.5, 3.0}) h.WithLabels({"Sandbox"}).Observe(v);
  reg.AddGaugeCallback("kubicle_dump_sandboxes", "By phase.", {"phase"}, [] {
    return std::vector<std::pair<kubicle::metrics::LabelValues, double>>{{{"Running"}, 4},
                                                                          {{"Pending"}, 1}};
  });
  std::cout << reg.Render();
}
