// e2e of the Workspace kind (issue 14) on the real control plane with the
// real operator and a real kubicle-node (test guest on this machine's KVM):
// a Workspace becomes Ready on the node with its token hash; its files are
// written and read through the node's data plane with the workspace token,
// no VM running; a Sandbox with spec.workspaceRef lands on that node; a
// second one is refused (WorkspaceInUse) until the first is deleted; the
// Workspace's finalizer goes only after the disk is gone from the node's
// state directory. kubectl-kubicle cp ws/data reaches the same files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "common/base64.h"
#include "e2e/e2e_env.h"
#include "e2e/harness/process.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using kube::Json;
using namespace std::chrono_literals;

std::string StatusOf(const Json& o, const std::string& f) {
  const Json& st = o.value("status", Json::object());
  return st.contains(f) && st[f].is_string() ? st[f].get<std::string>() : "";
}
std::string Reason(const Json& o, const std::string& type) {
  for (const Json& c : o.value("status", Json::object()).value("conditions", Json::array())) {
    if (c.value("type", "") == type) return c.value("reason", "");
  }
  return "";
}

// curl against the node's data plane, verifying it with the node's CA.
std::string Curl(const std::string& args) {
  std::string out;
  FILE* p = ::popen(("curl -sS " + args + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

class WorkspaceE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    c = NewClient();
    ns = TestNamespace(c.get());
    auto n = NodeProcess::Start(ns + "-node");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
    ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "py").ok());
    ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "py", node->name())) << node->LogTail();
    auto op = OperatorProcess::Start(ns);
    ASSERT_TRUE(op.ok());
    operator_ = std::move(*op);
  }
  void TearDown() override {
    if (c && node && operator_) CleanUpNamespace(c.get(), ns);
    if (HasFailure() && node) {
      std::cerr << "--- node log (tail) ---\n" << node->LogTail() << "\n";
      if (operator_) std::cerr << "operator log: " << operator_->log_path << "\n";
    }
    if (operator_) operator_->Stop();
    node.reset();
  }
  std::optional<Json> Get(const kube::Resource& r, const std::string& name) {
    auto g = c->Get(r, ns, name);
    return g.ok() ? std::optional<Json>(*g) : std::nullopt;
  }
  Json WithWorkspace(const std::string& name) {
    Json s = SandboxManifest(name, "py");
    s["spec"]["workspaceRef"] = {{"name", "data"}};
    return s;
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  std::unique_ptr<NodeProcess> node;
  std::unique_ptr<OperatorProcess> operator_;
};

TEST_F(WorkspaceE2E, AWorkspaceThroughTheApiserverOneWriterAndTeardown) {
  ASSERT_TRUE(c->Create(kube::WorkspaceResource(), ns,
                        Json{{"metadata", {{"name", "data"}}}, {"spec", {{"sizeMiB", 16}}}}).ok());
  ASSERT_TRUE(Eventually([&] {
    auto w = Get(kube::WorkspaceResource(), "data");
    return w && (StatusOf(*w, "phase") == "Ready" || StatusOf(*w, "phase") == "Failed");
  }, std::chrono::seconds(60)));
  Json ws = *Get(kube::WorkspaceResource(), "data");
  ASSERT_EQ(StatusOf(ws, "phase"), "Ready") << ws.dump();
  EXPECT_EQ(StatusOf(ws, "nodeName"), node->name());
  EXPECT_EQ(StatusOf(ws, "tokenSha256").size(), 64u);
  const std::string id = ws["status"]["disk"].value("id", "");
  ASSERT_EQ(id, "w-" + ws["metadata"]["uid"].get<std::string>());
  EXPECT_TRUE(std::filesystem::exists(node->state_dir() + "/workspaces/" + id));

  // Files through the data plane with the workspace's token, no VM.
  auto secret = Get(kube::SecretResource(), StatusOf(ws, "tokenSecretName"));
  ASSERT_TRUE(secret.has_value());
  auto token = Base64Decode((*secret)["data"]["token"].get<std::string>());
  ASSERT_TRUE(token.ok());
  const std::string auth = "-H 'Authorization: Bearer " + std::string(token->begin(), token->end()) + "' ";
  const std::string url = "https://" + ws["status"]["disk"].value("endpoint", "") + "/v1/workspaces/" + id;
  Curl("--cacert " + node->ca_file() + " " + auth + "-X PUT --data-binary 'hello workspace' '" + url +
       "/files?path=/notes/a.txt'");
  EXPECT_EQ(Curl("--cacert " + node->ca_file() + " " + auth + "'" + url + "/files?path=/notes/a.txt'"),
            "hello workspace");
  EXPECT_NE(Curl("--cacert " + node->ca_file() + " -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer x' '" +
                 url + "/files?path=/notes/a.txt'"),
            "200");
  // The plugin finds the same disk from the objects alone (cp ws/NAME).
  auto plugin = [&](std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), KUBICLE_PLUGIN_BIN);
    for (std::string f : std::vector<std::string>{"-n", ns, "--kubeconfig=" + Cluster()->kubeconfig_path()})
      args.push_back(f);
    auto r = RunCommand(args, input, 60s);
    return r.ok() ? *r : CommandResult{-1, r.status().ToString()};
  };
  auto got = plugin({"cp", "ws/data:/notes/a.txt", "-"});
  EXPECT_EQ(got.exit_code, 0) << got.output;
  EXPECT_EQ(got.output, "hello workspace");
  auto put = plugin({"cp", "-", "ws/data:/notes/b.txt"}, "from the plugin");
  EXPECT_EQ(put.exit_code, 0) << put.output;
  EXPECT_EQ(Curl("--cacert " + node->ca_file() + " " + auth + "'" + url + "/files?path=/notes/b.txt'"),
            "from the plugin");

  // One writer: s1 lands on the workspace's node; s2 waits.
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, WithWorkspace("s1")).ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = Get(kube::SandboxResource(), "s1");
    return s && !StatusOf(*s, "nodeName").empty();
  }));
  EXPECT_EQ(StatusOf(*Get(kube::SandboxResource(), "s1"), "nodeName"), node->name());
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, WithWorkspace("s2")).ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = Get(kube::SandboxResource(), "s2");
    return s && Reason(*s, "Scheduled") == "WorkspaceInUse";
  }));
  EXPECT_TRUE(StatusOf(*Get(kube::SandboxResource(), "s2"), "nodeName").empty());
  ASSERT_TRUE(Eventually([&] {
    auto s = Get(kube::SandboxResource(), "s1");
    return s && (StatusOf(*s, "phase") == "Running" || StatusOf(*s, "phase") == "Failed");
  }, std::chrono::seconds(120)));
  EXPECT_EQ(StatusOf(*Get(kube::SandboxResource(), "s1"), "phase"), "Running")
      << Get(kube::SandboxResource(), "s1")->dump();
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  ASSERT_TRUE(Eventually([&] {
    auto s = Get(kube::SandboxResource(), "s2");
    return s && StatusOf(*s, "phase") == "Running";
  }, std::chrono::seconds(120)));

  // Deleting the Workspace waits for s2, then for the node's delete.
  ASSERT_TRUE(c->Delete(kube::WorkspaceResource(), ns, "data").ok());
  ASSERT_TRUE(Eventually([&] {
    auto w = Get(kube::WorkspaceResource(), "data");
    return w && Reason(*w, "Ready") == "InUse";
  }));
  EXPECT_TRUE(std::filesystem::exists(node->state_dir() + "/workspaces/" + id));
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s2").ok());
  ASSERT_TRUE(Eventually([&] { return !Get(kube::WorkspaceResource(), "data"); }, std::chrono::seconds(120)));
  EXPECT_FALSE(std::filesystem::exists(node->state_dir() + "/workspaces/" + id))
      << "the finalizer went before the disk";
}

}  // namespace
}  // namespace kubicle::e2e
