// e2e of GitOps health (issue 22): what Flux/kpt (kstatus, the real
// sigs.k8s.io/cli-utils library) and Argo CD (the chart's Lua health checks
// in helm/kubicle/argocd, run by gopher-lua as Argo CD runs them) compute
// for each kind at each phase, from objects `kubectl get -o json` reads from
// the real apiserver, written by the real operator and a real kubicle-node
// (test guest on this machine's KVM). The checker is e2e/health, built and
// cached by e2e/health/build.sh.
//   Sandbox:  created with no operator running -> InProgress;
//             Pending (no such template) -> InProgress; Running -> Current;
//             suspended -> InProgress / Argo Suspended; resumed -> Current;
//             its kubicle-vmm killed -> Failed / Degraded, with the reason.
//   SandboxTemplate: good -> Current; a kernel that does not exist -> Failed.
//   SandboxFork: all children running -> Current; a child's VMM killed ->
//             Failed; a child's name taken -> Failed (NameConflict).
//   Workspace: Ready -> Current; larger than the node's disk -> Failed.
#include <gtest/gtest.h>
#include <signal.h>

#include "e2e/e2e_env.h"
#include "e2e/harness/process.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using kube::Json;
using namespace std::chrono_literals;

struct Health {
  std::string kstatus, kstatus_message, argocd, argocd_message;
  std::string ToString() const {
    return "kstatus " + kstatus + " (" + kstatus_message + "), argocd " + argocd + " (" +
           argocd_message + ")";
  }
};

// The checker's path (built on first use), or "" with the reason in `why`.
const std::string& Checker(std::string* why) {
  static std::string why_once;
  static const std::string path = [] {
    auto r = RunCommand({std::string(KUBICLE_SOURCE_DIR) + "/e2e/health/build.sh"}, {}, 900s);
    if (!r.ok()) {
      why_once = r.status().ToString();
      return std::string();
    }
    if (r->exit_code != 0) {
      why_once = "e2e/health/build.sh failed:\n" + r->output;
      return std::string();
    }
    std::string out = r->output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  }();
  *why = why_once;
  return path;
}

std::string Phase(const Json& o) {
  const Json& st = o.value("status", Json::object());
  return st.contains("phase") && st["phase"].is_string() ? st["phase"].get<std::string>() : "";
}
bool Observed(const Json& o) {
  return o.value("status", Json::object()).value("observedGeneration", -1) ==
         o["metadata"].value("generation", 0);
}

class HealthE2E : public ::testing::Test {
 protected:
  static constexpr const char* kArgoDir = KUBICLE_SOURCE_DIR "/helm/kubicle/argocd";

  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    std::string why;
    checker = Checker(&why);
    ASSERT_FALSE(checker.empty()) << why;
    c = NewClient();
    ns = TestNamespace(c.get());
    auto n = NodeProcess::Start(ns + "-node");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
    auto op = OperatorProcess::Start(ns);
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    operator_ = std::move(*op);
    ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "good").ok());
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

  // `kubectl get <resource> <name> -o json` piped to the checker.
  // `may_be_gone`: an object already deleted gives {} instead of a failure.
  Health Check(const std::string& resource, const std::string& name, bool may_be_gone = false) {
    auto got = Cluster()->Kubectl({"get", "-n", ns, resource, name, "-o", "json"});
    if (may_be_gone && got.ok() && got->output.find("NotFound") != std::string::npos) return {};
    if (!got.ok() || got->exit_code != 0) {
      ADD_FAILURE() << "kubectl get " << resource << " " << name << ": "
                    << (got.ok() ? got->output : got.status().ToString());
      return {};
    }
    auto r = RunCommand({checker, "--argocd", kArgoDir}, got->output, 60s);
    if (!r.ok() || r->exit_code != 0) {
      ADD_FAILURE() << "checker: " << (r.ok() ? r->output : r.status().ToString());
      return {};
    }
    Json line = Json::parse(r->output, nullptr, false);
    if (line.is_discarded()) {
      ADD_FAILURE() << "checker printed " << r->output;
      return {};
    }
    return {line["kstatus"].value("status", ""), line["kstatus"].value("message", ""),
            line["argocd"].value("status", ""), line["argocd"].value("message", "")};
  }

  // Waits until the object's phase is `phase` with its generation observed
  // (the operator has computed its status for the current spec).
  Json WaitPhase(const kube::Resource& r, const std::string& name, const std::string& phase,
                 std::chrono::milliseconds timeout = 120s) {
    Json last;
    Eventually([&] {
      auto g = c->Get(r, ns, name);
      if (!g.ok()) return false;
      last = *g;
      return Phase(last) == phase && Observed(last);
    }, timeout);
    EXPECT_EQ(Phase(last), phase) << last.dump(1);
    return last;
  }

  void KillVm(const Json& sandbox) {
    auto pid = node->VmProcess(VmId(sandbox));
    ASSERT_TRUE(pid.ok()) << pid.status().ToString();
    ASSERT_EQ(::kill(pid->pid, SIGKILL), 0);
  }

  std::string checker, ns;
  std::unique_ptr<kube::HttpKubeClient> c;
  std::unique_ptr<NodeProcess> node;
  std::unique_ptr<OperatorProcess> operator_;
};

TEST_F(HealthE2E, TemplatesGoodAndOneThatCannotBake) {
  TemplateOptions bad;
  bad.kernel = ImageRoot() + "/no-such-vmlinux";
  ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "bad", bad).ok());
  WaitPhase(kube::SandboxTemplateResource(), "good", "Ready");
  Health h = Check("sandboxtemplate", "good");
  EXPECT_EQ(h.kstatus, "Current") << h.ToString();
  EXPECT_EQ(h.argocd, "Healthy") << h.ToString();

  WaitPhase(kube::SandboxTemplateResource(), "bad", "Failed");
  h = Check("sandboxtemplate", "bad");
  EXPECT_EQ(h.kstatus, "Failed") << h.ToString();
  EXPECT_EQ(h.argocd, "Degraded") << h.ToString();
  EXPECT_NE(h.kstatus_message.find("no-such-vmlinux"), std::string::npos)
      << "the pipeline sees why: " << h.ToString();
  EXPECT_EQ(h.argocd_message, h.kstatus_message);
}

TEST_F(HealthE2E, SandboxPendingRunningSuspendedResumedAndItsVmDies) {
  // Before any operator pass: the CRD's status default keeps kstatus from
  // calling a bare new object Current.
  operator_->Stop();
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("fresh", "good")).ok());
  Health h = Check("sandbox", "fresh");
  EXPECT_EQ(h.kstatus, "InProgress") << h.ToString();
  EXPECT_EQ(h.argocd, "Progressing") << h.ToString();
  auto op = OperatorProcess::Start(ns + "-again");
  ASSERT_TRUE(op.ok()) << op.status().ToString();
  operator_ = std::move(*op);

  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("waits", "no-such-template")).ok());
  WaitPhase(kube::SandboxResource(), "waits", "Pending");
  h = Check("sandbox", "waits");
  EXPECT_EQ(h.kstatus, "InProgress") << h.ToString();
  EXPECT_EQ(h.argocd, "Progressing") << h.ToString();

  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "good", node->name())) << node->LogTail();
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("s", "good")).ok());
  Json s = WaitPhase(kube::SandboxResource(), "s", "Running");
  h = Check("sandbox", "s");
  EXPECT_EQ(h.kstatus, "Current") << h.ToString();
  EXPECT_EQ(h.argocd, "Healthy") << h.ToString();

  auto suspend = [&](bool on) {
    return c->Patch(kube::SandboxResource(), ns, "s", kube::PatchType::kMerge,
                    Json{{"spec", {{"suspend", on}}}});
  };
  ASSERT_TRUE(suspend(true).ok());
  WaitPhase(kube::SandboxResource(), "s", "Suspended");
  h = Check("sandbox", "s");
  EXPECT_EQ(h.kstatus, "InProgress") << "kstatus has no suspended state: " << h.ToString();
  EXPECT_EQ(h.argocd, "Suspended") << h.ToString();
  ASSERT_TRUE(suspend(false).ok());
  s = WaitPhase(kube::SandboxResource(), "s", "Running");
  h = Check("sandbox", "s");
  EXPECT_EQ(h.kstatus, "Current") << h.ToString();
  EXPECT_EQ(h.argocd, "Healthy") << h.ToString();

  KillVm(s);
  WaitPhase(kube::SandboxResource(), "s", "Failed", 60s);
  h = Check("sandbox", "s");
  EXPECT_EQ(h.kstatus, "Failed") << h.ToString();
  EXPECT_EQ(h.argocd, "Degraded") << h.ToString();
  EXPECT_FALSE(h.kstatus_message.empty());
}

TEST_F(HealthE2E, ForksThatSucceedAndFail) {
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "good", node->name())) << node->LogTail();
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("src", "good")).ok());
  WaitPhase(kube::SandboxResource(), "src", "Running");
  auto fork = [](const std::string& name) {
    return Json{{"metadata", {{"name", name}}},
                {"spec", {{"sourceRef", {{"name", "src"}}}, {"replicas", 2}}}};
  };
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork("f")).ok());
  WaitPhase(kube::SandboxForkResource(), "f", "Ready");
  Health h = Check("sandboxfork", "f");
  EXPECT_EQ(h.kstatus, "Current") << h.ToString();
  EXPECT_EQ(h.argocd, "Healthy") << h.ToString();

  auto child = c->Get(kube::SandboxResource(), ns, "f-1");
  ASSERT_TRUE(child.ok());
  KillVm(*child);
  WaitPhase(kube::SandboxForkResource(), "f", "Failed", 60s);
  h = Check("sandboxfork", "f");
  EXPECT_EQ(h.kstatus, "Failed") << h.ToString();
  EXPECT_EQ(h.argocd, "Degraded") << h.ToString();

  // A child's name taken by a Sandbox the fork does not own.
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("g-0", "no-such-template")).ok());
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork("g")).ok());
  Json g = WaitPhase(kube::SandboxForkResource(), "g", "Pending");
  Eventually([&] {
    h = Check("sandboxfork", "g");
    return h.kstatus == "Failed";
  }, 30s);
  EXPECT_EQ(h.kstatus, "Failed") << h.ToString();
  EXPECT_EQ(h.argocd, "Degraded") << h.ToString();
  EXPECT_NE(h.kstatus_message.find("g-0"), std::string::npos) << h.ToString();
}

TEST_F(HealthE2E, WorkspacesReadyAndTooLargeForTheNode) {
  // Pinned to this test's node: the Leases of earlier tests' nodes are
  // still fresh for a while, and the operator could place it on one.
  auto ws = [&](const std::string& name, int64_t mib) {
    return Json{{"metadata", {{"name", name}}},
                {"spec", {{"sizeMiB", mib}, {"nodeName", node->name()}}}};
  };
  ASSERT_TRUE(c->Create(kube::WorkspaceResource(), ns, ws("data", 16)).ok());
  WaitPhase(kube::WorkspaceResource(), "data", "Ready");
  Health h = Check("workspace", "data");
  EXPECT_EQ(h.kstatus, "Current") << h.ToString();
  EXPECT_EQ(h.argocd, "Healthy") << h.ToString();

  // 1 TiB, the schema's maximum: more than this machine's disk holds.
  ASSERT_TRUE(c->Create(kube::WorkspaceResource(), ns, ws("huge", 1048576)).ok());
  WaitPhase(kube::WorkspaceResource(), "huge", "Failed");
  h = Check("workspace", "huge");
  EXPECT_EQ(h.kstatus, "Failed") << h.ToString();
  EXPECT_EQ(h.argocd, "Degraded") << h.ToString();
  EXPECT_FALSE(h.kstatus_message.empty());

  // Deleting: kstatus says Terminating while the finalizer waits for the
  // node to delete the disk.
  ASSERT_TRUE(c->Delete(kube::WorkspaceResource(), ns, "data").ok());
  h = Check("workspace", "data", /*may_be_gone=*/true);
  if (!h.kstatus.empty()) {  // else already gone: nothing to ask
    EXPECT_EQ(h.kstatus, "Terminating") << h.ToString();
    EXPECT_EQ(h.argocd, "Progressing") << h.ToString();
  }
  ASSERT_TRUE(c->Delete(kube::WorkspaceResource(), ns, "huge").ok());
}

}  // namespace
}  // namespace kubicle::e2e
