#include "plugin/sandbox_access.h"

#include <gtest/gtest.h>

#include "kube/fake_kube_client.h"
#include "kube/json_fields.h"
#include "kube/resource.h"

namespace kubicle::plugin {
namespace {

Json Sandbox(const std::string& endpoint = "10.0.0.5:7443") {
  return {{"metadata", {{"name", "sbx"}, {"uid", "0f1e"}, {"labels", {{"kubicle.dev/node", "n1"}}}}},
          {"status", {{"phase", "Running"}, {"tokenSecretName", "sbx-token"},
                      {"vm", {{"endpoint", endpoint}}}}}};
}
Json Secret(const std::string& b64 = "c2VjcmV0") {  // "secret"
  return {{"metadata", {{"name", "sbx-token"}}}, {"data", {{"token", b64}}}};
}
Json Lease(const std::string& ca) {
  Json l{{"metadata", {{"name", "kubicle-node-n1"}}}};
  if (!ca.empty()) l["metadata"]["annotations"] = {{"kubicle.dev/serving-ca", ca}};
  return l;
}
constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

TEST(SandboxAccess, TlsWhenTheLeasePublishesACa) {
  auto dp = DataPlaneFrom(Sandbox(), Secret(), Lease(kCa));
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_EQ(dp->url, "https://10.0.0.5:7443");
  EXPECT_EQ(dp->ca_pem, kCa);
  EXPECT_EQ(dp->vm_id, "k-0f1e");
  EXPECT_EQ(dp->Path("/exec"), "/v1/sandboxes/k-0f1e/exec");
  EXPECT_EQ(dp->token, "secret");
  EXPECT_EQ(dp->node, "n1");
}

TEST(SandboxAccess, PlainHttpOnlyWithoutACa) {
  auto dp = DataPlaneFrom(Sandbox(), Secret(), Lease(""));
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(dp->url, "http://10.0.0.5:7443");
  EXPECT_TRUE(dp->ca_pem.empty());
}

TEST(SandboxAccess, SaysWhatIsMissing) {
  auto no_endpoint = DataPlaneFrom(Sandbox(""), Secret(), Lease(""));
  EXPECT_EQ(no_endpoint.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_endpoint.status().message().find("no VM endpoint yet (phase Running)"), std::string::npos);
  EXPECT_FALSE(DataPlaneFrom(Sandbox("h:1/evil"), Secret(), Lease("")).ok());
  EXPECT_NE(DataPlaneFrom(Sandbox(), Secret(""), Lease("")).status().message().find("no data.token"),
            std::string::npos);
  EXPECT_FALSE(DataPlaneFrom(Sandbox(), Secret("!!"), Lease("")).ok());
  EXPECT_FALSE(DataPlaneFrom(Sandbox(), Json::object(), Lease("")).ok());
  // Hostile shapes read as absent, never throw.
  Json weird = Sandbox();
  weird["status"]["vm"] = "nope";
  EXPECT_FALSE(DataPlaneFrom(weird, Secret(), Json(42)).ok());
}

Json Workspace(const std::string& disk_id = "w-9a8b") {
  Json w{{"metadata", {{"name", "data"}, {"uid", "9a8b"}}},
         {"status", {{"phase", "Ready"}, {"nodeName", "n1"}, {"tokenSecretName", "data-workspace-token"}}}};
  if (!disk_id.empty()) w["status"]["disk"] = {{"id", disk_id}, {"endpoint", "10.0.0.5:7443"}};
  return w;
}

TEST(SandboxAccess, AWorkspacesDiskIsReachedByItsNodesName) {
  auto dp = WorkspaceDataPlaneFrom(Workspace(), Secret(), Lease(kCa));
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_EQ(dp->vm_id, "w-9a8b") << "the node's name of the disk, not the object's";
  EXPECT_EQ(dp->files_owner, noderuntime::client::FilesOwner::kWorkspace);
  EXPECT_EQ(dp->url, "https://10.0.0.5:7443");
  EXPECT_EQ(dp->token, "secret");
  auto no_disk = WorkspaceDataPlaneFrom(Workspace(""), Secret(), Lease(kCa));
  EXPECT_EQ(no_disk.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_disk.status().message().find("no disk on a node yet"), std::string::npos);
  EXPECT_FALSE(WorkspaceDataPlaneFrom(Workspace("../x"), Secret(), Lease(kCa)).ok()) << "not a disk name";
  EXPECT_FALSE(WorkspaceDataPlaneFrom(Workspace(), Secret(""), Lease(kCa)).ok());
  kube::FakeKubeClient kube;
  EXPECT_EQ(ResolveWorkspaceDataPlane(kube, "ns", "data", "leases").status().code(), StatusCode::kNotFound);
}

TEST(SandboxAccess, ResolveReadsTheThreeObjects) {
  kube::FakeKubeClient kube;
  ASSERT_TRUE(kube.Create(kube::SecretResource(), "ns", Secret()).ok());
  Json s = Sandbox();
  s["metadata"].erase("uid");
  auto created = kube.Create(kube::SandboxResource(), "ns", s);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(kube.Patch(kube::SandboxResource(), "ns", "sbx", kube::PatchType::kMerge,
                         {{"status", Sandbox()["status"]}}, "status").ok());
  auto no_lease = ResolveDataPlane(kube, "ns", "sbx", "leases");
  EXPECT_EQ(no_lease.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_lease.status().message().find("node n1"), std::string::npos);
  ASSERT_TRUE(kube.Create(kube::LeaseResource(), "leases", Lease(kCa)).ok());
  auto dp = ResolveDataPlane(kube, "ns", "sbx", "leases");
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_EQ(dp->vm_id, "k-" + kube::StrAt(*created, {"metadata", "uid"}));
  EXPECT_EQ(dp->url, "https://10.0.0.5:7443");
  auto missing = ResolveDataPlane(kube, "ns", "nope", "leases");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("not found in namespace ns"), std::string::npos);
}

// A Sandbox whose client brought its own token (spec.tokenSha256) has no
// Secret: the plugin says so instead of waiting for one.
TEST(SandboxAccess, ASandboxWithItsClientsOwnTokenIsRefusedSayingWhy) {
  kube::FakeKubeClient kube;
  Json s = Sandbox();
  s["spec"] = {{"templateRef", {{"name", "tg"}}}, {"tokenSha256", std::string(64, 'a')}};
  s["status"].erase("tokenSecretName");
  ASSERT_TRUE(kube.Create(kube::SandboxResource(), "ns", s).ok());
  ASSERT_TRUE(kube.Create(kube::LeaseResource(), "leases", Lease(kCa)).ok());
  auto dp = ResolveDataPlane(kube, "ns", "sbx", "leases");
  EXPECT_EQ(dp.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(dp.status().message().find("client's own token (spec.tokenSha256)"), std::string::npos)
      << dp.status().ToString();
}

}  // namespace
}  // namespace kubicle::plugin
