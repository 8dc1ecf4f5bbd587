#include "operator/controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include "kube/json_fields.h"
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
  std::map<std::string, int> by_type;
  for (const Json& sec : (*secrets)["items"]) by_type[sec.value("type", "")]++;
  EXPECT_EQ(by_type["kubicle.dev/sandbox-token"], 50);
  EXPECT_EQ(by_type["kubicle.dev/run-token"], 1) << "the template's run token";
  std::string text = reg.Render();
  EXPECT_NE(text.find("kubicle_operator_reconcile_duration_seconds_count{kind=\"Sandbox\"}"),
            std::string::npos);
  EXPECT_NE(text.find("kubicle_operator_sandboxes{phase=\"Scheduled\"}"), std::string::npos);
  c.Stop();
}

// A node that stops renewing its Lease produces no event at all; its
// Sandboxes still fail once the Lease has expired and the grace has passed
// (the per-node timer of NodeReconciler), and only then.
// A run-token Secret deleted behind the operator's back is seen through its
// Secret informer and made again; the template publishes the new hash.
TEST(ControllerTest, ADeletedRunTokenSecretIsMadeAgain) {
  testing::World w;
  w.AddTemplate("py");
  metrics::Registry reg;
  ControllerOptions opts;
  opts.config.node_lease_namespace = testing::kLeaseNs;
  Controller c(&w.client, &w.clock, &reg, opts);
  ASSERT_TRUE(c.Start(std::chrono::seconds(5)).ok());
  auto hash = [&] {
    auto t = w.client.Get(kube::SandboxTemplateResource(), kNs, "py");
    return t.ok() ? kube::StrAt(*t, {"status", "runTokenSha256"}) : std::string();
  };
  ASSERT_TRUE(Eventually([&] { return !hash().empty(); }));
  const std::string first = hash();
  ASSERT_TRUE(w.client.Delete(kube::SecretResource(), kNs, "py-run").ok());
  w.Heartbeat("node-a", 30, /*duration_s=*/10);  // any node's heartbeat requeues every template
  ASSERT_TRUE(Eventually([&] { return !hash().empty() && hash() != first; })) << hash();
  EXPECT_TRUE(w.client.Get(kube::SecretResource(), kNs, "py-run").ok());
  c.Stop();
}

TEST(ControllerTest, ASilentlyDeadNodesSandboxesFailAfterTheGrace) {
  testing::World w;
  w.AddTemplate("py");
  w.Heartbeat("node-a", 30, /*duration_s=*/10);
  w.TemplateReady("py", "node-a");
  metrics::Registry reg;
  ControllerOptions opts;
  opts.config.node_lease_namespace = testing::kLeaseNs;
  opts.config.node_gone_grace = std::chrono::seconds(60);
  Controller c(&w.client, &w.clock, &reg, opts);
  ASSERT_TRUE(c.Start(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, testing::NewSandbox("s", "py")).ok());
  ASSERT_TRUE(Eventually([&] { return !StatusString(w.Sandbox("s"), "tokenSha256").empty(); }));
  w.ReportVm("s", "Running");
  ASSERT_TRUE(Eventually([&] { return StatusString(w.Sandbox("s"), "phase") == "Running"; }));

  // The node dies: no renewal, no event. Within the grace nothing happens:
  // rather than watch for nothing for a while, the test reads when the
  // Sandbox failed from its Ready condition's lastTransitionTime (the fake
  // clock's time of that pass), which must be after the grace.
  w.clock.Advance(std::chrono::seconds(10 + 30));
  c.Poke();
  EXPECT_EQ(StatusString(w.Sandbox("s"), "phase"), "Running");
  w.clock.Advance(std::chrono::seconds(31));
  const kube::TimePoint after_grace = w.clock.Now();
  c.Poke();
  ASSERT_TRUE(Eventually([&] { return StatusString(w.Sandbox("s"), "phase") == "Failed"; }))
      << w.Sandbox("s")["status"].dump();
  const Json failed = w.Sandbox("s");
  const Json* lost = nullptr;
  for (const Json& cnd : failed["status"]["conditions"]) {
    if (cnd["type"] == "Ready" && cnd["reason"] == "NodeLost") lost = &cnd;
  }
  ASSERT_NE(lost, nullptr) << failed["status"].dump();
  EXPECT_EQ(lost->value("lastTransitionTime", ""), kube::FormatTime(after_grace))
      << "failed within the grace";
  c.Stop();
}

// Throws a std::exception, then something that is not one, then succeeds.
class ThrowingReconciler final : public Reconciler {
 public:
  Result<Outcome> Reconcile(const std::string& key) override {
    int n = calls++;
    if (n == 0) throw std::runtime_error("boom in " + key);
    if (n == 1) throw 42;
    return Outcome{};
  }
  std::atomic<int> calls{0};
};

TEST(ControllerTest, AReconcilerThatThrowsIsAnErrorAnEventAndARetryNotACrash) {
  testing::World w;
  metrics::Registry reg;
  ControllerOptions opts;
  opts.workers = 2;
  opts.config.node_lease_namespace = testing::kLeaseNs;
  // A real clock for the queue, so backoff retries come by themselves.
  Controller c(&w.client, &kube::RealClock::Instance(), &reg, opts);
  auto thrower = std::make_unique<ThrowingReconciler>();
  ThrowingReconciler* t = thrower.get();
  c.ReplaceReconciler("Sandbox", std::move(thrower));
  ASSERT_TRUE(c.Start(std::chrono::seconds(5)).ok());
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, testing::NewSandbox("s", "py")).ok());
  ASSERT_TRUE(Eventually([&] { return t->calls.load() >= 3; })) << t->calls.load();
  auto warnings = [&] {
    std::vector<Json> out;
    const Json list = *w.client.List(kube::EventResource(), kNs, {});
    for (const Json& e : list["items"]) {
      if (e["reason"] == "ReconcileError") out.push_back(e);
    }
    return out;
  };
  ASSERT_TRUE(Eventually([&] { return warnings().size() == 2; })) << warnings().size();
  for (const Json& e : warnings()) {
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_EQ(e["involvedObject"]["name"], "s");
  }
  std::set<std::string> messages;
  for (const Json& e : warnings()) messages.insert(e["message"].get<std::string>());
  EXPECT_TRUE(messages.count("reconcile failed, will retry: boom in team/s")) << *messages.begin();
  EXPECT_TRUE(messages.count(
      "reconcile failed, will retry: an exception that is not a std::exception"));
  std::string text = reg.Render();
  EXPECT_NE(text.find("kubicle_operator_reconcile_total{kind=\"Sandbox\",result=\"error\"} 2"),
            std::string::npos) << text;
  EXPECT_TRUE(Eventually([&] {
    return reg.Render().find("kubicle_operator_reconcile_total{kind=\"Sandbox\",result=\"success\"} 1") !=
           std::string::npos;
  })) << "the retry after the throws succeeds";
  c.Stop();
}

}  // namespace
}  // namespace kubicle::op
