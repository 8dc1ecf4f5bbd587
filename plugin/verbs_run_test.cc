// kubectl kubicle run against an in-memory apiserver (a SandboxTemplate as
// the operator and a node agent leave it, its run-token Secret) and a real
// node API listener over FakeSandboxService.
#include <gtest/gtest.h>

#include <sstream>

#include "common/sha256.h"
#include "kube/fake_kube_client.h"
#include "kube/resource.h"
#include "noderuntime/server/api_server.h"
#include "noderuntime/api/codec.h"
#include "noderuntime/server/testing/fake_sandbox_service.h"
#include "plugin/verbs.h"

namespace kubicle::plugin {
namespace {

using kube::Json;

class RunVerbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    noderuntime::server::ApiServerOptions opts;
    opts.admin_token = "admin";
    server_ = std::make_unique<noderuntime::server::ApiServer>(&node_, &registry_, opts);
    Status st = Status::Unavailable("no attempt");
    for (int i = 0; i < 5 && !st.ok(); ++i) {
      auto port = noderuntime::server::PickFreePort();
      ASSERT_TRUE(port.ok());
      endpoint_ = "127.0.0.1:" + std::to_string(*port);
      st = server_->Start("127.0.0.1", *port);
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(node_.PutTemplate({.name = "py-node", .kernel = "/guest", .mem_mib = 64}).ok());
    ASSERT_TRUE(node_.SetRunToken("py-node", Sha256Hex("run-tok")).ok());
    env_.kube = &kube_;
    env_.ns = "ns";
    env_.in = &in_;
    env_.out = &out_;
    env_.err = &err_;
  }
  void TearDown() override { server_->Stop(); }

  void Publish(bool ready = true, const std::string& token = "run-tok") {
    ASSERT_TRUE(kube_.Create(kube::SandboxTemplateResource(), "ns",
                             {{"metadata", {{"name", "py"}}}, {"spec", Json::object()}}).ok());
    const auto* t = reinterpret_cast<const uint8_t*>(token.data());
    ASSERT_TRUE(kube_.Create(kube::SecretResource(), "ns",
                             {{"metadata", {{"name", "py-run"}}},
                              {"data", {{"token", noderuntime::api::Base64Encode({t, token.size()})}}}}).ok());
    Json status{{"runTokenSecretName", "py-run"}, {"runTokenSha256", Sha256Hex(token)},
                {"nodes", {{{"nodeName", "n1"}, {"phase", ready ? "Ready" : "Failed"},
                            {"observedGeneration", 1}, {"endpoint", endpoint_}, {"nodeTemplate", "py-node"}}}}};
    ASSERT_TRUE(kube_.Patch(kube::SandboxTemplateResource(), "ns", "py", kube::PatchType::kMerge,
                            {{"status", status}}, "status").ok());
  }
  int Run(const std::vector<std::string>& args) {
    out_.str("");
    err_.str("");
    auto inv = ParseArgs(args);
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    return inv.ok() ? RunVerb(*inv, env_) : -1;
  }

  noderuntime::server::testing::FakeSandboxService node_;
  metrics::Registry registry_;
  std::unique_ptr<noderuntime::server::ApiServer> server_;
  std::string endpoint_;
  kube::FakeKubeClient kube_;
  std::istringstream in_;
  std::ostringstream out_, err_;
  Env env_;
};

TEST_F(RunVerbTest, RunPrintsTheOutputAndExitsWithTheCommandsCode) {
  Publish();
  EXPECT_EQ(Run({"run", "py", "--", "echo", "hello", "run"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "hello run\n");
  EXPECT_EQ(Run({"run", "py", "--", "fail", "7"}), 7);
  EXPECT_EQ(Run({"run", "py", "--", "no-such-command"}), 127);
  EXPECT_EQ(node_.runs(), 3);
}

TEST_F(RunVerbTest, RefusalsAndFailures) {
  EXPECT_EQ(Run({"run", "py", "echo"}), kExitUsage);
  EXPECT_EQ(Run({"run", "--", "echo"}), kExitUsage);
  EXPECT_EQ(Run({"run", "py", "-e", "novalue", "--", "echo"}), kExitUsage);
  EXPECT_EQ(Run({"run", "py", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("\"py\" not found in namespace ns"), std::string::npos) << err_.str();
  Publish(/*ready=*/false);
  EXPECT_EQ(Run({"run", "py", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("not Ready on any node"), std::string::npos) << err_.str();
  EXPECT_EQ(node_.runs(), 0);
}

TEST_F(RunVerbTest, AWrongRunTokenIsRefusedByTheNode) {
  Publish(true, "stale-token");
  EXPECT_EQ(Run({"run", "py", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("401"), std::string::npos) << err_.str();
  EXPECT_EQ(node_.runs(), 0);
}

TEST_F(RunVerbTest, AWorkspaceRunGoesToItsNodeAndNamesItsDisk) {
  Publish();
  EXPECT_EQ(Run({"run", "py", "--workspace", "ws", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("Workspace \"ws\" not found"), std::string::npos) << err_.str();
  ASSERT_TRUE(kube_.Create(kube::WorkspaceResource(), "ns",
                           {{"metadata", {{"name", "ws"}}}, {"spec", {{"sizeMiB", 64}}}}).ok());
  EXPECT_EQ(Run({"run", "py", "--workspace", "ws", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("no disk on a node yet"), std::string::npos) << err_.str();
  auto place = [&](const std::string& node) {
    ASSERT_TRUE(kube_.Patch(kube::WorkspaceResource(), "ns", "ws", kube::PatchType::kMerge,
                            {{"status", {{"nodeName", node}, {"disk", {{"id", "w-uid1"}}}}}}, "status").ok());
  };
  place("n2");  // the template serves runs on n1 only
  EXPECT_EQ(Run({"run", "py", "--workspace", "ws", "--", "echo"}), kExecFailed);
  EXPECT_NE(err_.str().find("not Ready on node n2"), std::string::npos) << err_.str();
  place("n1");
  EXPECT_EQ(Run({"run", "py", "--workspace", "ws", "--", "echo"}), kExecFailed);  // no disk w-uid1 yet
  EXPECT_NE(err_.str().find("w-uid1"), std::string::npos) << err_.str();
  ASSERT_TRUE(node_.PutWorkspace({.name = "w-uid1", .size_mib = 64}).ok());
  EXPECT_EQ(Run({"run", "py", "--workspace", "ws", "--", "echo", "in", "ws"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "in ws\n");
  auto held = node_.GetWorkspace("w-uid1");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->attached_to, "") << "free again when the run ends";
}

}  // namespace
}  // namespace kubicle::plugin
