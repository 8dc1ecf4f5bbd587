#include "operator/workspace_reconciler.h"

#include <gtest/gtest.h>

#include "operator/sandbox_reconciler.h"
#include "operator/test_world.h"

namespace kubicle::op {
namespace {

using testing::kNs;
using testing::NewSandbox;

Json NewWorkspace(const std::string& name, int64_t size_mib = 64, const std::string& pin = "") {
  Json w = {{"metadata", {{"name", name}}}, {"spec", {{"sizeMiB", size_mib}}}};
  if (!pin.empty()) w["spec"]["nodeName"] = pin;
  return w;
}

Json WithWorkspace(Json sandbox, const std::string& ws) {
  sandbox["spec"]["workspaceRef"] = {{"name", ws}};
  return sandbox;
}

class WorkspaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    w.AddTemplate("py");
    w.Heartbeat("node-a", 10);
    w.Heartbeat("node-b", 10);
    w.TemplateReady("py", "node-a");
    w.TemplateReady("py", "node-b");
  }
  Result<Outcome> ReconcileWs(const std::string& name) {
    WorkspaceReconciler r(w.ctx);
    return r.Reconcile(kube::ObjectKey(kNs, name));
  }
  Result<Outcome> ReconcileSbx(const std::string& name) {
    SandboxReconciler r(w.ctx);
    return r.Reconcile(kube::ObjectKey(kNs, name));
  }
  Json Ws(const std::string& name) {
    auto got = w.client.Get(kube::WorkspaceResource(), kNs, name);
    EXPECT_TRUE(got.ok()) << name;
    return got.ok() ? *got : Json::object();
  }
  // The node daemon's report, as WorkspaceSync writes it.
  void ReportDisk(const std::string& ws, const Json& disk) {
    ASSERT_TRUE(w.client.Patch(kube::WorkspaceResource(), kNs, ws, kube::PatchType::kMerge,
                               Json{{"status", {{"disk", disk}}}}, "status").ok());
  }
  std::string Reason(const Json& obj, const std::string& type) {
    auto c = FindCondition(obj, type);
    return c ? c->value("reason", "") : "";
  }
  // A Ready workspace on `node` (pinned).
  void ReadyWorkspace(const std::string& name, const std::string& node) {
    ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace(name, 64, node)).ok());
    ASSERT_TRUE(ReconcileWs(name).ok());
    ReportDisk(name, {{"state", "Ready"}, {"bytesUsed", 4096}});
    ASSERT_TRUE(ReconcileWs(name).ok());
    ASSERT_EQ(Ws(name)["status"]["phase"], "Ready");
  }
  testing::World w;
};

TEST_F(WorkspaceTest, PlacedWithFinalizerTokenAndStatusThenReadyFromTheNodesReport) {
  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("data")).ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  Json ws = Ws("data");
  EXPECT_TRUE(HasFinalizer(ws, kWorkspaceFinalizer));
  EXPECT_EQ(Label(ws, kLabelNode), "node-a");  // fewest workspaces, ties by name
  EXPECT_EQ(ws["status"]["nodeName"], "node-a");
  EXPECT_EQ(ws["status"]["phase"], "Pending");
  EXPECT_EQ(Reason(ws, "Ready"), "Provisioning");
  EXPECT_EQ(ws["status"]["tokenSecretName"], "data-workspace-token");
  EXPECT_EQ(ws["status"]["tokenSha256"].get<std::string>().size(), 64u);
  auto secret = w.client.Get(kube::SecretResource(), kNs, "data-workspace-token");
  ASSERT_TRUE(secret.ok());
  EXPECT_TRUE(IsControlledBy(*secret, Uid(ws)));
  EXPECT_EQ((*secret)["type"], "kubicle.dev/workspace-token");

  ReportDisk("data", {{"state", "Ready"}, {"bytesUsed", 123456}, {"endpoint", "10.0.0.1:7443"}});
  ASSERT_TRUE(ReconcileWs("data").ok());
  ws = Ws("data");
  EXPECT_EQ(ws["status"]["phase"], "Ready");
  EXPECT_EQ(Reason(ws, "Ready"), "DiskReady");
  EXPECT_EQ(ws["status"]["bytesUsed"], 123456);
  EXPECT_EQ(ws["status"]["disk"]["endpoint"], "10.0.0.1:7443") << "the node's part is untouched";

  // Nothing changed: nothing written.
  w.client.ClearActions();
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_TRUE(w.client.Actions().empty()) << w.client.Actions()[0];

  // A second workspace goes to the node with fewer.
  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("more")).ok());
  ASSERT_TRUE(ReconcileWs("more").ok());
  EXPECT_EQ(Label(Ws("more"), kLabelNode), "node-b");
}

TEST_F(WorkspaceTest, APinIsHonouredAndWithoutALiveNodeItWaits) {
  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("pinned", 8, "node-z")).ok());
  ASSERT_TRUE(ReconcileWs("pinned").ok());
  EXPECT_EQ(Label(Ws("pinned"), kLabelNode), "node-z");

  w.clock.Advance(std::chrono::seconds(60));  // both Leases expire
  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("lost")).ok());
  auto out = ReconcileWs("lost");
  ASSERT_TRUE(out.ok());
  Json ws = Ws("lost");
  EXPECT_EQ(Label(ws, kLabelNode), "");
  EXPECT_EQ(ws["status"]["phase"], "Pending");
  EXPECT_EQ(Reason(ws, "Scheduled"), "NoLiveNode");
  EXPECT_EQ(*out->requeue_after, std::chrono::seconds(5));
}

TEST_F(WorkspaceTest, ASandboxWaitsForItsWorkspaceAndLandsOnItsNode) {
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox("s1", "py"), "data")).ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  Json s = w.Sandbox("s1");
  EXPECT_EQ(s["status"]["phase"], "Pending");
  EXPECT_EQ(Reason(s, "Scheduled"), "WorkspaceNotFound");

  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("data", 64, "node-b")).ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  s = w.Sandbox("s1");
  EXPECT_EQ(Reason(s, "Scheduled"), "WorkspaceNotReady");
  EXPECT_NE(FindCondition(s, "Scheduled")->value("message", "").find("node-b"), std::string::npos);
  EXPECT_EQ(Label(s, kLabelNode), "");

  ReportDisk("data", {{"state", "Ready"}});
  ASSERT_TRUE(ReconcileWs("data").ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  s = w.Sandbox("s1");
  // node-a and node-b are equally loaded; node-a would win the tie.
  EXPECT_EQ(Label(s, kLabelNode), "node-b");
  EXPECT_EQ(s["status"]["phase"], "Scheduled");
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_EQ(Ws("data")["status"]["attachedTo"], "s1");
}

TEST_F(WorkspaceTest, TheTemplateMustBeReadyOnTheWorkspacesNode) {
  ReadyWorkspace("data", "node-c");
  w.Heartbeat("node-c", 10);  // live, but the template is not baked there
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox("s1", "py"), "data")).ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  Json s = w.Sandbox("s1");
  EXPECT_EQ(Label(s, kLabelNode), "");
  EXPECT_EQ(Reason(s, "Scheduled"), "NoReadyNode");
  EXPECT_NE(FindCondition(s, "Scheduled")->value("message", "").find("node-c"), std::string::npos);
}

TEST_F(WorkspaceTest, OneWriterAtATime) {
  ReadyWorkspace("data", "node-a");
  for (const char* n : {"s1", "s2"}) {
    ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox(n, "py"), "data")).ok());
  }
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  ASSERT_TRUE(ReconcileSbx("s2").ok());
  EXPECT_EQ(Label(w.Sandbox("s1"), kLabelNode), "node-a");
  Json s2 = w.Sandbox("s2");
  EXPECT_EQ(Label(s2, kLabelNode), "");
  EXPECT_EQ(s2["status"]["phase"], "Pending");
  EXPECT_EQ(Reason(s2, "Scheduled"), "WorkspaceInUse");
  EXPECT_NE(FindCondition(s2, "Scheduled")->value("message", "").find("Sandbox s1"), std::string::npos);

  // The holder is deleted: it keeps the workspace until the node tore its
  // VM down and its object is gone.
  w.ReportVm("s1", "Running");
  ASSERT_TRUE(w.client.Delete(kube::SandboxResource(), kNs, "s1").ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  ASSERT_TRUE(ReconcileSbx("s2").ok());
  EXPECT_EQ(Reason(w.Sandbox("s2"), "Scheduled"), "WorkspaceInUse");
  w.ReportVm("s1", "Terminated");
  ASSERT_TRUE(ReconcileSbx("s1").ok());  // finalizer removed: gone
  EXPECT_FALSE(w.client.Get(kube::SandboxResource(), kNs, "s1").ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());  // gone: its claim is released
  ASSERT_TRUE(ReconcileSbx("s2").ok());
  s2 = w.Sandbox("s2");
  EXPECT_EQ(Label(s2, kLabelNode), "node-a");
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_EQ(Ws("data")["status"]["attachedTo"], "s2");
}

TEST_F(WorkspaceTest, ClaimsCoverPlacementsTheCacheDoesNotShowYet) {
  WorkspaceClaims claims;
  auto exists = [](const std::string&) { return true; };
  EXPECT_EQ(claims.Claim("team/data", "team/s1", exists), "");
  EXPECT_EQ(claims.Claim("team/data", "team/s1", exists), "") << "a claimant may ask again";
  EXPECT_EQ(claims.Claim("team/data", "team/s2", exists), "team/s1");
  // A claimant whose object is gone holds nothing.
  EXPECT_EQ(claims.Claim("team/data", "team/s2", [](const std::string&) { return false; }), "");
  claims.Release("team/s2");
  EXPECT_EQ(claims.Claim("team/data", "team/s3", exists), "");
}

TEST_F(WorkspaceTest, TheNodesRefusalIsAReadyCondition) {
  ReadyWorkspace("data", "node-a");
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox("s1", "py"), "data")).ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  ASSERT_TRUE(w.client.Patch(kube::SandboxResource(), kNs, "s1", kube::PatchType::kMerge,
                             Json{{"status", {{"vm", {{"state", "Waiting"},
                                                      {"message", "workspace w-x is attached to run-1"}}}}}},
                             "status").ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  Json s = w.Sandbox("s1");
  EXPECT_EQ(s["status"]["phase"], "Scheduled");
  EXPECT_EQ(Reason(s, "Ready"), "WorkspaceInUse");
  EXPECT_EQ(FindCondition(s, "Ready")->value("message", ""), "workspace w-x is attached to run-1");
}

TEST_F(WorkspaceTest, DeletionWaitsForItsSandboxThenForTheNode) {
  ReadyWorkspace("data", "node-a");
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox("s1", "py"), "data")).ok());
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  ASSERT_TRUE(w.client.Delete(kube::WorkspaceResource(), kNs, "data").ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  Json ws = Ws("data");
  EXPECT_TRUE(HasFinalizer(ws, kWorkspaceFinalizer));
  EXPECT_EQ(ws["status"]["phase"], "Terminating");
  EXPECT_EQ(Reason(ws, "Ready"), "InUse");
  EXPECT_NE(FindCondition(ws, "Ready")->value("message", "").find("s1"), std::string::npos);

  // The Sandbox goes; the node has not deleted the disk yet.
  ASSERT_TRUE(w.client.Delete(kube::SandboxResource(), kNs, "s1").ok());
  w.ReportVm("s1", "Terminated");
  ASSERT_TRUE(ReconcileSbx("s1").ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  ws = Ws("data");
  EXPECT_EQ(Reason(ws, "Ready"), "Terminating");
  EXPECT_TRUE(HasFinalizer(ws, kWorkspaceFinalizer));

  // A Sandbox that asks for a workspace being deleted is not placed.
  ASSERT_TRUE(w.client.Create(kube::SandboxResource(), kNs, WithWorkspace(NewSandbox("late", "py"), "data")).ok());
  ASSERT_TRUE(ReconcileSbx("late").ok());
  EXPECT_EQ(Reason(w.Sandbox("late"), "Scheduled"), "WorkspaceNotReady");

  ReportDisk("data", {{"state", "Deleted"}});
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_FALSE(w.client.Get(kube::WorkspaceResource(), kNs, "data").ok());
}

TEST_F(WorkspaceTest, AGoneNodeReleasesTheFinalizerAfterTheGrace) {
  ReadyWorkspace("data", "node-a");
  w.clock.Advance(std::chrono::seconds(41));  // node-a's Lease expired
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_EQ(Ws("data")["status"]["phase"], "Ready") << "within the grace";
  w.clock.Advance(std::chrono::seconds(121));
  ASSERT_TRUE(ReconcileWs("data").ok());
  Json ws = Ws("data");
  EXPECT_EQ(ws["status"]["phase"], "Failed");
  EXPECT_EQ(Reason(ws, "Ready"), "NodeLost");
  ASSERT_TRUE(w.client.Delete(kube::WorkspaceResource(), kNs, "data").ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  EXPECT_FALSE(w.client.Get(kube::WorkspaceResource(), kNs, "data").ok());
}

TEST_F(WorkspaceTest, AForeignSecretOfTheNameFailsTheWorkspaceAndIsNeverTouched) {
  ASSERT_TRUE(w.client.Create(kube::SecretResource(), kNs,
                              Json{{"metadata", {{"name", "data-workspace-token"}}},
                                   {"stringData", {{"token", "mine"}}}}).ok());
  ASSERT_TRUE(w.client.Create(kube::WorkspaceResource(), kNs, NewWorkspace("data")).ok());
  ASSERT_TRUE(ReconcileWs("data").ok());
  Json ws = Ws("data");
  EXPECT_EQ(ws["status"]["phase"], "Failed");
  EXPECT_EQ(Reason(ws, "Ready"), "TokenSecretConflict");
  EXPECT_TRUE(ws["status"]["tokenSha256"].is_null());
}

TEST(WorkspaceStatus, HoldersArePlacedSandboxesOfTheNamespaceReferencingIt) {
  auto sbx = [](const std::string& ns, const std::string& name, const std::string& ws, bool placed) {
    Json s = {{"metadata", {{"namespace", ns}, {"name", name}}}, {"spec", {{"workspaceRef", {{"name", ws}}}}}};
    if (placed) s["metadata"]["labels"]["kubicle.dev/node"] = "n";
    return s;
  };
  std::vector<Json> all = {sbx("a", "z", "data", true), sbx("a", "y", "data", true), sbx("a", "x", "data", false),
                           sbx("b", "w", "data", true), sbx("a", "v", "other", true),
                           Json{{"metadata", {{"namespace", "a"}, {"name", "hostile"}}}, {"spec", 7}}};
  EXPECT_EQ(WorkspaceHolders(all, "a", "data"), (std::vector<std::string>{"y", "z"}));
}

TEST(WorkspaceView, ASpecOfTheWrongShapeIsNamed) {
  WorkspaceView v = WorkspaceView::Parse(Json{{"metadata", {{"name", "x"}}}, {"spec", {{"sizeMiB", "big"}}}});
  ASSERT_EQ(v.problems.size(), 1u);
  EXPECT_NE(v.problems[0].find("spec.sizeMiB"), std::string::npos);
  WorkspaceView none = WorkspaceView::Parse(Json{{"metadata", {{"name", "x"}}}});
  EXPECT_FALSE(none.problems.empty());
}

}  // namespace
}  // namespace kubicle::op
