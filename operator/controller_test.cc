#include "operator/controller.h"

#include <gtest/gtest.h>

#include <thread>

#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;

bool Eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// The whole operator in memory: informers, queue, workers, reconcilers.
TEST(ControllerTest, FanOutOfFiftySandboxesConvergesWithoutDuplicates) {
  testing::World w;  // real clock would also do; the fake keeps leases fresh
  w.AddTemplate("py");
  w.Heartbeat("node-a", 30);
  w.Heartbeat("node-b", 30);
  w.TemplateReady("py", "node-a");
  w.TemplateReady("py", "node-b");
  metrics::Registry reg;
  ControllerOptions opts;
  opts.workers = 4;
  opts.config.node_lease_namespace = testing::kLeaseNs;
  Controller c(&w.client, &w.clock, &reg, opts);
  ASSERT_TRUE(c.Start(std::chrono::seconds(5)).ok());
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs,
                                testing::NewSandbox("s" + std::to_string(i), "py",
                                                    {{"kubicle.dev/run", "fan"}})).ok());
  }
  auto placed = [&](std::map<std::string, int>* per_node) {
    int n = 0;
    const Json list = *w.client.List(kube::SandboxResource(), kNs, {});
    for (const Json& s : list["items"]) {
      if (StatusString(s, "nodeName").empty() || StatusString(s, "tokenSha256").empty()) continue;
      ++n;
      if (per_node) (*per_node)[Label(s, kLabelNode)]++;
    }
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return placed(nullptr) == 50; })) << placed(nullptr);
  std::map<std::string, int> per_node;
  placed(&per_node);
  EXPECT_LE(per_node["node-a"], 30);
  EXPECT_LE(per_node["node-b"], 30);
  auto secrets = w.client.List(kube::SecretResource(), kNs, {});
  EXPECT_EQ((*secrets)["items"].size(), 50u);
  std::string text = reg.Render();
  EXPECT_NE(text.find("kubicle_operator_reconcile_duration_seconds_count{kind=\"Sandbox\"}"),
            std::string::npos);
  EXPECT_NE(text.find("kubicle_operator_sandboxes{phase=\"Scheduled\"}"), std::string::npos);
  c.Stop();
}

}  // namespace
}  // namespace kubicle::op
