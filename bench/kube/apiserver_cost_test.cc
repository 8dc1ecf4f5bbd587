#include "bench/kube/apiserver_cost.h"

#include <gtest/gtest.h>

namespace kubicle::bench {
namespace {

constexpr char kBefore[] = R"(# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 10.5
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="",verb="POST",version="v1alpha1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 99
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
)";

constexpr char kAfter[] = R"(process_cpu_seconds_total 12.75
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="",verb="POST",version="v1alpha1"} 6
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubicle.dev",resource="sandboxes",scope="namespace",subresource="",verb="LIST",version="v1alpha1"} 150
apiserver_request_total{code="201",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
)";

TEST(ApiserverCost, CountsWritesByResourceAndSubresourceSummedOverCodes) {
  auto s = ParseApiserverMetrics(kBefore);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_DOUBLE_EQ(s->cpu_seconds, 10.5);
  EXPECT_DOUBLE_EQ(s->writes.at("sandboxes"), 4);
  EXPECT_DOUBLE_EQ(s->writes.at("sandboxes/status"), 8);  // 200 and 409 both reached the apiserver
  EXPECT_DOUBLE_EQ(s->writes.at("leases"), 3);
  EXPECT_EQ(s->writes.size(), 3u);  // the LIST is a read
}

TEST(ApiserverCost, DiffKeepsOnlyResourcesWrittenDuringThePhase) {
  auto d = Diff(*ParseApiserverMetrics(kBefore), *ParseApiserverMetrics(kAfter));
  EXPECT_DOUBLE_EQ(d.cpu_seconds, 2.25);
  EXPECT_DOUBLE_EQ(d.writes.at("sandboxes"), 2);
  EXPECT_DOUBLE_EQ(d.writes.at("sandboxes/status"), 6);
  EXPECT_DOUBLE_EQ(d.writes.at("events"), 2);
  EXPECT_FALSE(d.writes.contains("leases"));
  EXPECT_DOUBLE_EQ(TotalWrites(d), 10);
  EXPECT_EQ(FormatCost(d, 2),
            "apiserver CPU 2.25 s; writes per Sandbox 5.00 (sandboxes/status 3.00, events 1.00, sandboxes 1.00)");
}

TEST(ApiserverCost, RefusesTextThatIsNotAnApiserversMetrics) {
  EXPECT_FALSE(ParseApiserverMetrics("error: the server doesn't have a resource type\n").ok());
  EXPECT_FALSE(ParseApiserverMetrics(std::string(kMaxMetricsBytes + 1, 'x')).ok());
}

TEST(ApiserverCost, SkipsMalformedSamples) {
  auto s = ParseApiserverMetrics(
      "process_cpu_seconds_total 1\n"
      "apiserver_request_total{resource=\"secrets\",verb=\"POST\"} -3\n"
      "apiserver_request_total{resource=\"secrets\",verb=\"POST\"} NaN\n"
      "apiserver_request_total{resource=\"secrets\",verb=\"POST\" 5\n"
      "apiserver_request_total{verb=\"POST\"} 5\n"
      "apiserver_request_total{resource=\"secrets\",verb=\"POST\"} 2 1700000000000\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->writes.size(), 1u);
  EXPECT_DOUBLE_EQ(s->writes.at("secrets"), 2);
}

}  // namespace
}  // namespace kubicle::bench
