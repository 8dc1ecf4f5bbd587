// DeleteEverySandbox (the chart's pre-delete hook) against the fake
// apiserver, with a "node" thread that tears VMs down as the real one does:
// it removes the finalizer of each Sandbox being deleted.
#include "noderuntime/daemon/uninstall.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>

#include "kube/fake_kube_client.h"

namespace kubicle::noderuntime::daemon {
namespace {

using kube::Json;
using namespace std::chrono_literals;

Json Sandbox(const std::string& ns, const std::string& name) {
  return Json{{"metadata", {{"name", name}, {"namespace", ns}, {"finalizers", {"kubicle.dev/vm-teardown"}}}},
              {"spec", {{"template", "t"}}}};
}

class UninstallTest : public ::testing::Test {
 protected:
  // A Sandbox the operator placed on `node` (status is a subresource).
  void Add(Json sandbox, const std::string& node) {
    const std::string ns = sandbox["metadata"]["namespace"];
    auto made = kube_.Create(kube::SandboxResource(), ns, sandbox);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    (*made)["status"] = {{"nodeName", node}, {"phase", "Running"}};
    ASSERT_TRUE(kube_.Update(kube::SandboxResource(), ns, *made, "status").ok());
  }

  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(Add(Sandbox("a", "s1"), "n1"));
    ASSERT_NO_FATAL_FAILURE(Add(Sandbox("b", "s2"), "n2"));
    auto fork = kube_.Create(kube::SandboxForkResource(), "a",
                             Json{{"metadata", {{"name", "f"}, {"namespace", "a"}}}, {"spec", {{"source", "s1"}}}});
    ASSERT_TRUE(fork.ok());
    Json child = Sandbox("a", "f-0");
    child["metadata"]["ownerReferences"] = Json::array(
        {{{"apiVersion", "kubicle.dev/v1alpha1"}, {"kind", "SandboxFork"}, {"name", "f"},
          {"uid", (*fork)["metadata"]["uid"]}}});
    ASSERT_NO_FATAL_FAILURE(Add(child, "n1"));
    ASSERT_TRUE(kube_.Create(kube::WorkspaceResource(), "a",
                             Json{{"metadata", {{"name", "w"}, {"namespace", "a"},
                                                {"finalizers", {"kubicle.dev/workspace-teardown"}}}},
                                  {"spec", {{"sizeMiB", 64}}}}).ok());
  }

  // The nodes: release the finalizer of every Sandbox being deleted, on
  // nodes that are up.
  void RunNodes(const std::set<std::string>& up) {
    nodes_ = std::thread([this, up] {
      while (!stop_) {
        auto list = kube_.List(kube::SandboxResource(), "", {});
        if (list.ok()) {
          for (Json o : (*list)["items"]) {
            if (!o["metadata"].contains("deletionTimestamp") || !up.count(o["status"].value("nodeName", ""))) continue;
            o["metadata"]["finalizers"] = Json::array();
            (void)kube_.Update(kube::SandboxResource(), o["metadata"]["namespace"].get<std::string>(), o);
          }
        }
        std::this_thread::sleep_for(5ms);
      }
    });
  }
  void TearDown() override {
    stop_ = true;
    if (nodes_.joinable()) nodes_.join();
  }

  kube::FakeKubeClient kube_;
  std::thread nodes_;
  std::atomic<bool> stop_{false};
};

TEST_F(UninstallTest, DeletesEverySandboxAndForkAndWaitsForTheNodes) {
  RunNodes({"n1", "n2"});
  std::vector<std::string> lines;
  UninstallOptions o;
  o.timeout = 60s;
  o.poll = 10ms;
  o.progress = [&](const std::string& l) { lines.push_back(l); };
  ASSERT_TRUE(DeleteEverySandbox(kube_, o).ok());
  EXPECT_TRUE((*kube_.List(kube::SandboxResource(), "", {}))["items"].empty());
  EXPECT_TRUE((*kube_.List(kube::SandboxForkResource(), "", {}))["items"].empty());
  // Workspaces are durable data: kept, finalizer and all.
  EXPECT_EQ((*kube_.List(kube::WorkspaceResource(), "", {}))["items"].size(), 1u);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "no Sandbox is left");
}

TEST_F(UninstallTest, NamesTheSandboxesOfANodeThatIsDownWhenTimeRunsOut) {
  RunNodes({"n1"});
  UninstallOptions o;
  o.timeout = 300ms;
  o.poll = 10ms;
  Status s = DeleteEverySandbox(kube_, o);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("b/s2 (node n2, phase Running"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find("a/s1"), std::string::npos) << "n1 tore its VMs down: " << s.ToString();
  EXPECT_NE(s.message().find("Uninstall"), std::string::npos);
}

TEST_F(UninstallTest, PermissionDeniedEndsAtOnceAndUnavailableIsRetried) {
  kube_.FailNext("list", Status::PermissionDenied("forbidden"));
  UninstallOptions o;
  o.timeout = 60s;
  o.poll = 1ms;
  EXPECT_EQ(DeleteEverySandbox(kube_, o).code(), StatusCode::kPermissionDenied);
  RunNodes({"n1", "n2"});
  kube_.FailNext("list", Status::Unavailable("apiserver restarting"), 3);
  EXPECT_TRUE(DeleteEverySandbox(kube_, o).ok());
}

}  // namespace
}  // namespace kubicle::noderuntime::daemon
