#include "operator/fork_reconciler.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "operator/sandbox_reconciler.h"
#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;
using testing::NewSandbox;

class ForkReconcilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w.AddTemplate("py");
    w.Heartbeat("node-a", 100);
    w.Heartbeat("node-b", 100);
    w.TemplateReady("py", "node-a");
    ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs,
                                NewSandbox("src", "py", {{"kubicle.dev/run", "r1"},
                                                         {"kubicle.dev/agent", "planner"}})).ok());
    ASSERT_TRUE(SandboxReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, "src")).ok());
  }
  void CreateFork(int replicas) {
    Json f = {{"metadata", {{"name", "f"}, {"labels", {{"kubicle.dev/run", "r2"}}}}},
              {"spec", {{"sourceRef", {{"name", "src"}}}, {"replicas", replicas},
                        {"childMetadata", {{"labels", {{"team", "x"}}}}}}}};
    ASSERT_TRUE(w.client.Create(kube::SandboxForkResource(), kNs, f).ok());
  }
  Result<Outcome> Reconcile() { return ForkReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, "f")); }
  Json Fork() { return *w.client.Get(kube::SandboxForkResource(), kNs, "f"); }
  testing::World w;
};

TEST_F(ForkReconcilerTest, CreatesOwnedChildrenOnTheSourcesNode) {
  CreateFork(3);
  ASSERT_TRUE(Reconcile().ok());
  Json fork = Fork();
  for (int i = 0; i < 3; ++i) {
    Json c = w.Sandbox("f-" + std::to_string(i));
    EXPECT_TRUE(IsControlledBy(c, Uid(fork)));
    EXPECT_EQ(Label(c, kLabelNode), "node-a");
    EXPECT_EQ(Label(c, kLabelForkOf), "f");
    EXPECT_EQ(Label(c, kLabelRun), "r2") << "the fork's run wins over the source's";
    EXPECT_EQ(Label(c, kLabelAgent), "planner");
    EXPECT_EQ(Label(c, "team"), "x");
    EXPECT_EQ(c["spec"]["forkSource"], "src");
    EXPECT_EQ(c["spec"]["expiresAt"], w.Sandbox("src")["status"]["expiresAt"]);
  }
  EXPECT_EQ(fork["status"]["replicas"], 3);
  EXPECT_EQ(fork["status"]["readyReplicas"], 0);
  EXPECT_EQ(fork["status"]["phase"], "Forking");
  EXPECT_EQ(fork["status"]["nodeName"], "node-a");
}

TEST_F(ForkReconcilerTest, ChildrenCopyTheSourcesNetwork) {
  Json src = w.Sandbox("src");
  const Json network = {{"egress", {{"allow", {{{"cidr", "1.2.3.0/24"}, {"ports", {443}}}}}}}};
  src["spec"]["network"] = network;
  ASSERT_TRUE(w.client.Update(kube::SandboxResource(), kNs, src).ok());
  CreateFork(2);
  ASSERT_TRUE(Reconcile().ok());
  for (const char* c : {"f-0", "f-1"}) EXPECT_EQ(w.Sandbox(c)["spec"]["network"], network) << c;
}

// spec.childTokenSha256: child i brings its client's own token as item i
// (spec.tokenSha256), so its Sandbox pass makes no Secret; a child past
// the list, or of an item the CRD should have refused, gets a minted one.
TEST_F(ForkReconcilerTest, ChildrenTakeTheClientsOwnTokenHashes) {
  const std::string a = Sha256Hex("child 0"), b = Sha256Hex("child 1");
  Json f = {{"metadata", {{"name", "f"}}},
            {"spec",
             {{"sourceRef", {{"name", "src"}}},
              {"replicas", 4},
              {"childTokenSha256", {a, b, std::string(64, 'A')}}}}};
  ASSERT_TRUE(w.client.Create(kube::SandboxForkResource(), kNs, f).ok());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(w.Sandbox("f-0")["spec"]["tokenSha256"], a);
  EXPECT_EQ(w.Sandbox("f-1")["spec"]["tokenSha256"], b);
  EXPECT_FALSE(w.Sandbox("f-2")["spec"].contains("tokenSha256"));
  EXPECT_FALSE(w.Sandbox("f-3")["spec"].contains("tokenSha256"));
  for (const char* c : {"f-0", "f-1", "f-2", "f-3"})
    ASSERT_TRUE(SandboxReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, c)).ok()) << c;
  EXPECT_EQ(w.Sandbox("f-0")["status"]["tokenSha256"], a);
  EXPECT_FALSE(w.Sandbox("f-0")["status"].contains("tokenSecretName"));
  EXPECT_EQ(w.Sandbox("f-1")["status"]["tokenSha256"], b);
  for (const char* c : {"f-0", "f-1"}) {
    EXPECT_TRUE(kube::IsNotFound(
        w.client.Get(kube::SecretResource(), kNs, std::string(c) + "-token").status()))
        << c;
  }
  for (const char* c : {"f-2", "f-3"}) {
    EXPECT_TRUE(w.client.Get(kube::SecretResource(), kNs, std::string(c) + "-token").ok()) << c;
    EXPECT_EQ(w.Sandbox(c)["status"]["tokenSecretName"], std::string(c) + "-token");
  }
}

TEST_F(ForkReconcilerTest, IdempotentAcrossRestartsAndCountsReady) {
  CreateFork(2);
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(Reconcile().ok());  // a restarted operator: same names, nothing new
  int children = 0;
  const Json list = *w.client.List(kube::SandboxResource(), kNs, {});
    for (const Json& s : list["items"]) {
    if (Label(s, kLabelForkOf) == "f") ++children;
  }
  EXPECT_EQ(children, 2);
  for (const char* c : {"f-0", "f-1"}) {
    ASSERT_TRUE(SandboxReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, c)).ok());
    w.ReportVm(c, "Running");
    ASSERT_TRUE(SandboxReconciler(w.ctx).Reconcile(kube::ObjectKey(kNs, c)).ok());
  }
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(Fork()["status"]["readyReplicas"], 2);
  EXPECT_EQ(Fork()["status"]["phase"], "Ready");
  EXPECT_EQ(FindCondition(Fork(), "Ready")->value("status", ""), "True");
}

TEST_F(ForkReconcilerTest, ScaleDownDeletesHighestIndexes) {
  CreateFork(3);
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(w.client.Patch(kube::SandboxForkResource(), kNs, "f", kube::PatchType::kMerge,
                             Json{{"spec", {{"replicas", 1}}}}).ok());
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_TRUE(w.client.Get(kube::SandboxResource(), kNs, "f-0").ok());
  // Children are born with the teardown finalizer: a deleted one waits for
  // its node to report the VM gone.
  EXPECT_TRUE(IsDeleting(w.Sandbox("f-2")));
  EXPECT_TRUE(HasFinalizer(w.Sandbox("f-2"), kFinalizer));
  EXPECT_FALSE(IsDeleting(w.Sandbox("f-0")));
  EXPECT_EQ(Fork()["status"]["replicas"], 1);
}

TEST_F(ForkReconcilerTest, WaitsForAMissingSource) {
  Json f = {{"metadata", {{"name", "f"}}}, {"spec", {{"sourceRef", {{"name", "nope"}}}, {"replicas", 2}}}};
  ASSERT_TRUE(w.client.Create(kube::SandboxForkResource(), kNs, f).ok());
  auto out = Reconcile();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Fork()["status"]["phase"], "Pending");
  EXPECT_EQ(FindCondition(Fork(), "Ready")->value("reason", ""), "SourceNotFound");
  EXPECT_TRUE(out->requeue_after.has_value());
}

TEST_F(ForkReconcilerTest, ASpecOfTheWrongShapeForksNothingAndSaysWhy) {
  Json f = {{"metadata", {{"name", "f"}}},
            {"spec", {{"sourceRef", {{"name", "src"}}}, {"replicas", "3"},
                      {"childMetadata", {{"labels", {{"team", 1}}}}}}}};
  ASSERT_TRUE(w.client.Create(kube::SandboxForkResource(), kNs, f).ok());
  auto out = Reconcile();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FALSE(out->requeue_after) << "only a spec change (a new event) can fix it";
  EXPECT_TRUE(kube::IsNotFound(w.client.Get(kube::SandboxResource(), kNs, "f-0").status()));
  EXPECT_EQ(Fork()["status"]["phase"], "Pending");
  auto ready = FindCondition(Fork(), "Ready");
  EXPECT_EQ(ready->value("reason", ""), "InvalidSpec");
  EXPECT_EQ(ready->value("message", ""),
            "spec.replicas: expected an integer, got string; "
            "spec.childMetadata.labels.team: expected a string, got number");
}

TEST_F(ForkReconcilerTest, RefusesToAdoptAForeignSandbox) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, NewSandbox("f-0", "py")).ok());
  CreateFork(1);
  ASSERT_TRUE(Reconcile().ok());
  EXPECT_EQ(FindCondition(Fork(), "Ready")->value("reason", ""), "NameConflict");
  EXPECT_FALSE(IsControlledBy(w.Sandbox("f-0"), Uid(Fork())));
}

TEST_F(ForkReconcilerTest, DeletingTheForkCollectsChildren) {
  CreateFork(2);
  ASSERT_TRUE(Reconcile().ok());
  ASSERT_TRUE(w.client.Delete(kube::SandboxForkResource(), kNs, "f").ok());
  // The fake collects owned objects at once; the finalizer holds them until teardown.
  EXPECT_TRUE(IsDeleting(w.Sandbox("f-0")));
  EXPECT_TRUE(w.client.Get(kube::SandboxResource(), kNs, "src").ok());
}

}  // namespace
}  // namespace kubicle::op
