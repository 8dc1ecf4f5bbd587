// e2e of kubicle-operator on the real control plane with a real kubicle-node
// (NodeProcess: the test guest on this machine's KVM): scheduling and labels,
// TTL expiry, fork garbage collection by the real controller manager,
// sweeping a run by label, the operator killed mid fan-out, the apiserver
// restarted, capacity. The node side of each is covered in node_e2e_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "e2e/e2e_env.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using kube::Json;

std::string Label(const Json& o, const std::string& k) { return LabelOf(o, k); }
std::string Status_(const Json& o, const std::string& f) {
  return o.value("status", Json::object()).value(f, Json("")).is_string()
             ? o.value("status", Json::object()).value(f, "")
             : "";
}

class OperatorE2E : public ::testing::Test {
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
      std::cerr << "--- node log (tail) " << node->log_path() << " ---\n" << node->LogTail() << "\n";
      if (operator_) std::cerr << "operator log: " << operator_->log_path << "\n";
    }
    if (operator_) operator_->Stop();
    node.reset();
  }
  std::optional<Json> Get(const kube::Resource& r, const std::string& name) {
    auto g = c->Get(r, ns, name);
    return g.ok() ? std::optional<Json>(*g) : std::nullopt;
  }
  std::vector<Json> List(const kube::Resource& r, const std::string& selector = {}) {
    kube::ListOptions o;
    o.label_selector = selector;
    auto l = c->List(r, ns, o);
    std::vector<Json> out;
    if (l.ok()) for (const Json& i : (*l)["items"]) out.push_back(i);
    return out;
  }
  bool Scheduled(const std::string& name) {
    auto s = Get(kube::SandboxResource(), name);
    return s && !Status_(*s, "nodeName").empty() && !Status_(*s, "tokenSha256").empty();
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  std::unique_ptr<NodeProcess> node;
  std::unique_ptr<OperatorProcess> operator_;
};

TEST_F(OperatorE2E, SchedulesLabelsAndReportsReady) {
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns,
                        SandboxManifest("s1", "py", {{"kubicle.dev/run", "r1"}, {"kubicle.dev/agent", "a1"}})).ok());
  ASSERT_TRUE(Eventually([&] { return Scheduled("s1"); })) << "see " << operator_->log_path;
  Json s = *Get(kube::SandboxResource(), "s1");
  EXPECT_EQ(Status_(s, "nodeName"), node->name());
  EXPECT_EQ(Label(s, "kubicle.dev/node"), node->name());
  EXPECT_EQ(Label(s, "kubicle.dev/template"), "py");
  // The real node may already have reported its VM.
  EXPECT_TRUE(std::set<std::string>({"Scheduled", "Starting", "Running"}).count(Status_(s, "phase")))
      << Status_(s, "phase");
  EXPECT_FALSE(Status_(s, "expiresAt").empty()) << "default TTL applies";
  auto secret = Get(kube::SecretResource(), "s1-token");
  ASSERT_TRUE(secret.has_value());
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], s["metadata"]["uid"]);
  EXPECT_EQ(Label(*secret, "kubicle.dev/run"), "r1");
  ASSERT_TRUE(Eventually([&] {
    auto x = Get(kube::SandboxResource(), "s1");
    return x && Status_(*x, "phase") == "Running";
  }, std::chrono::seconds(120))) << "the node reports the VM Running";
  EXPECT_EQ((*Get(kube::SandboxResource(), "s1"))["status"]["vm"]["endpoint"], node->endpoint());
  auto tmpl = Get(kube::SandboxTemplateResource(), "py");
  EXPECT_EQ((*tmpl)["status"]["readyNodes"], 1);
  // Printer columns as users see them.
  auto get = Cluster()->Kubectl({"get", "sbx", "-n", ns});
  EXPECT_NE(get->output.find("Running"), std::string::npos) << get->output;
}

TEST_F(OperatorE2E, TtlExpiryDeletesTheSandboxAndItsSecret) {
  Json s = SandboxManifest("short", "py");
  s["spec"]["ttlSeconds"] = 3;
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, s).ok());
  ASSERT_TRUE(Eventually([&] { return Scheduled("short"); }));
  ASSERT_TRUE(Get(kube::SecretResource(), "short-token").has_value());
  ASSERT_TRUE(Eventually([&] { return !Get(kube::SandboxResource(), "short"); },
                         std::chrono::seconds(30)));
  EXPECT_TRUE(Eventually([&] { return !Get(kube::SecretResource(), "short-token"); },
                         std::chrono::seconds(60)))
      << "the garbage collector deletes the owned Secret";
}

// The operator (with the chart's RBAC: create and get on Secrets, never
// delete) leaves a user's Secret of the token's name alone and says so;
// once the user removes it, the Sandbox gets its own and runs.
TEST_F(OperatorE2E, AUsersSecretOfTheTokenNameFailsTheSandboxAndIsKept) {
  ASSERT_TRUE(c->Create(kube::SecretResource(), ns,
                        Json{{"metadata", {{"name", "mine-token"}}}, {"stringData", {{"token", "users"}}}}).ok());
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("mine", "py")).ok());
  auto ready_reason = [&] {
    auto s = Get(kube::SandboxResource(), "mine");
    if (!s) return std::string();
    for (const Json& cond : s->value("status", Json::object()).value("conditions", Json::array())) {
      if (cond.value("type", "") == "Ready") return cond.value("reason", "");
    }
    return std::string();
  };
  ASSERT_TRUE(Eventually([&] { return ready_reason() == "TokenSecretConflict"; }))
      << ready_reason() << "; see " << operator_->log_path;
  Json s = *Get(kube::SandboxResource(), "mine");
  EXPECT_EQ(Status_(s, "phase"), "Failed");
  EXPECT_EQ(Status_(s, "tokenSha256"), "");
  auto secret = Get(kube::SecretResource(), "mine-token");
  ASSERT_TRUE(secret.has_value());
  EXPECT_FALSE((*secret)["metadata"].contains("ownerReferences"));
  EXPECT_EQ((*secret)["data"]["token"], "dXNlcnM=") << "untouched";
  ASSERT_TRUE(c->Delete(kube::SecretResource(), ns, "mine-token").ok());
  EXPECT_TRUE(Eventually([&] {
    auto x = Get(kube::SandboxResource(), "mine");
    return x && Status_(*x, "phase") == "Running";
  }, std::chrono::seconds(180))) << ready_reason();
  auto own = Get(kube::SecretResource(), "mine-token");
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ((*own)["metadata"]["ownerReferences"][0]["uid"], (*Get(kube::SandboxResource(), "mine"))["metadata"]["uid"]);
}

TEST_F(OperatorE2E, DeletingAForkGarbageCollectsItsChildren) {
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns,
                        SandboxManifest("src", "py", {{"kubicle.dev/run", "r9"}})).ok());
  ASSERT_TRUE(Eventually([&] { return Scheduled("src"); }));
  Json fork = {{"metadata", {{"name", "f"}}},
               {"spec", {{"sourceRef", {{"name", "src"}}}, {"replicas", 3},
                         {"childMetadata", {{"labels", {{"role", "worker"}}}}}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(Eventually([&] {
    auto f = Get(kube::SandboxForkResource(), "f");
    return f && f->contains("status") && (*f)["status"].value("replicas", 0) == 3;
  }));
  auto children = List(kube::SandboxResource(), "kubicle.dev/fork-of=f");
  ASSERT_EQ(children.size(), 3u);
  for (const Json& ch : children) {
    EXPECT_EQ(Label(ch, "kubicle.dev/node"), node->name());
    EXPECT_EQ(Label(ch, "kubicle.dev/run"), "r9");
    EXPECT_EQ(Label(ch, "role"), "worker");
    EXPECT_EQ(ch["spec"]["forkSource"], "src");
  }
  auto del = Cluster()->Kubectl({"delete", "sbxf", "f", "-n", ns, "--wait=false"});
  ASSERT_EQ(del->exit_code, 0) << del->output;
  EXPECT_TRUE(Eventually([&] { return List(kube::SandboxResource(), "kubicle.dev/fork-of=f").empty(); },
                         std::chrono::seconds(60)));
  EXPECT_TRUE(Get(kube::SandboxResource(), "src").has_value()) << "the source stays";
}

TEST_F(OperatorE2E, KubectlDeleteByRunLabelSweepsTheRun) {
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(c->Create(kube::SandboxResource(), ns,
                          SandboxManifest("x" + std::to_string(i), "py",
                                          {{"kubicle.dev/run", i < 3 ? "sweep" : "keep"}})).ok());
  }
  ASSERT_TRUE(Eventually([&] { return Scheduled("x0"); }));
  Json fork = {{"metadata", {{"name", "xf"}, {"labels", {{"kubicle.dev/run", "sweep"}}}}},
               {"spec", {{"sourceRef", {{"name", "x0"}}}, {"replicas", 2}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(Eventually([&] { return List(kube::SandboxResource(), "kubicle.dev/fork-of=xf").size() == 2; }));
  auto del = Cluster()->Kubectl({"delete", "sandboxes,sandboxforks", "-n", ns, "-l",
                                 "kubicle.dev/run=sweep", "--wait=false"});
  ASSERT_EQ(del->exit_code, 0) << del->output;
  EXPECT_TRUE(Eventually([&] {
    return List(kube::SandboxResource(), "kubicle.dev/run=sweep").empty() &&
           List(kube::SandboxForkResource()).empty();
  }, std::chrono::seconds(60)));
  EXPECT_TRUE(Get(kube::SandboxResource(), "x3").has_value()) << "another run is untouched";
}

TEST_F(OperatorE2E, OperatorKilledMidFanOutConvergesWithoutDuplicates) {
  constexpr int kN = 50;
  for (int i = 0; i < kN; ++i) {
    ASSERT_TRUE(c->Create(kube::SandboxResource(), ns,
                          SandboxManifest("fan" + std::to_string(i), "py", {{"kubicle.dev/run", "fan"}})).ok());
    if (i == 10) {
      ASSERT_TRUE(Eventually([&] { return Scheduled("fan0"); }));
      operator_->Kill();  // SIGKILL mid fan-out
    }
  }
  Json fork = {{"metadata", {{"name", "ff"}}}, {"spec", {{"sourceRef", {{"name", "fan0"}}}, {"replicas", 20}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  auto op = OperatorProcess::Start(ns + "-2");  // a fresh replica, a fresh Lease
  ASSERT_TRUE(op.ok());
  operator_ = std::move(*op);
  ASSERT_TRUE(Eventually([&] {
    int scheduled = 0;
    for (const Json& s : List(kube::SandboxResource())) {
      if (!Status_(s, "nodeName").empty() && !Status_(s, "tokenSha256").empty()) ++scheduled;
    }
    return scheduled == kN + 20;
  }, std::chrono::seconds(90))) << "see " << operator_->log_path;
  auto sandboxes = List(kube::SandboxResource());
  EXPECT_EQ(sandboxes.size(), static_cast<size_t>(kN + 20)) << "no duplicate fork children";
  std::set<std::string> uids;
  for (const Json& s : sandboxes) {
    uids.insert(s["metadata"]["uid"]);
    EXPECT_EQ(Label(s, "kubicle.dev/node"), Status_(s, "nodeName"));
  }
  std::vector<Json> secrets;  // the templates' run-token Secrets aside
  for (const Json& sec : List(kube::SecretResource()))
    if (sec.value("type", "") == "kubicle.dev/sandbox-token") secrets.push_back(sec);
  EXPECT_EQ(secrets.size(), static_cast<size_t>(kN + 20)) << "one token Secret each";
  for (const Json& sec : secrets) {
    EXPECT_TRUE(uids.count(sec["metadata"]["ownerReferences"][0]["uid"])) << "no orphan Secret";
  }
  // And the node runs each of them exactly once.
  std::vector<std::string> want;
  for (const Json& s : sandboxes) want.push_back(VmId(s));
  std::sort(want.begin(), want.end());
  EXPECT_TRUE(Eventually([&] {
    for (const Json& s : List(kube::SandboxResource())) {
      if (Status_(s, "phase") != "Running") return false;
    }
    return node->SandboxVms() == want;
  }, std::chrono::seconds(300))) << "VMs: " << node->SandboxVms().size() << " of " << want.size();
}

TEST_F(OperatorE2E, ApiserverRestartMidRunAndWatchesRecover) {
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("before", "py")).ok());
  ASSERT_TRUE(Eventually([&] { return Scheduled("before"); }));
  ASSERT_TRUE(Cluster()->RestartApiserver().ok());
  auto created = c->Create(kube::SandboxResource(), ns, SandboxManifest("after", "py"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_TRUE(Eventually([&] { return Scheduled("after"); }, std::chrono::seconds(60)))
      << "the operator's watches came back; see " << operator_->log_path;
  EXPECT_TRUE(Eventually([&] {
    for (const char* n : {"before", "after"}) {
      auto s = Get(kube::SandboxResource(), n);
      if (!s || Status_(*s, "phase") != "Running") return false;
    }
    return true;
  }, std::chrono::seconds(120))) << "the node's reports reach the operator";
}

TEST_F(OperatorE2E, CapacityAndUnschedulableReasons) {
  // "tiny"'s images lie only under the small node's image root, so it is
  // Ready there and Failed on the main node.
  const std::string root = Cluster()->work_dir() + "/images-" + ns;
  ASSERT_TRUE(WriteTestGuestImages(root).ok());
  NodeOptions o;
  o.capacity_sandboxes = 1;
  o.image_roots = {ImageRoot(), root};
  auto small = NodeProcess::Start(ns + "-small", o);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "tiny", {.image_root = root}).ok());
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "tiny", (*small)->name())) << (*small)->LogTail();
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("t1", "tiny")).ok());
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("t2", "tiny")).ok());
  ASSERT_TRUE(c->Create(kube::SandboxResource(), ns, SandboxManifest("t3", "nope")).ok());
  auto reason = [&](const std::string& n) {
    auto s = Get(kube::SandboxResource(), n);
    if (!s || !s->contains("status")) return std::string();
    for (const Json& cnd : (*s)["status"].value("conditions", Json::array())) {
      if (cnd["type"] == "Scheduled") return cnd.value("reason", "");
    }
    return std::string();
  };
  EXPECT_TRUE(Eventually([&] {
    std::set<std::string> r = {reason("t1"), reason("t2")};
    return r == std::set<std::string>{"Scheduled", "InsufficientCapacity"};
  }));
  EXPECT_TRUE(Eventually([&] { return reason("t3") == "TemplateNotFound"; }));
  CleanUpNamespace(c.get(), ns);  // while the small node can still tear down
}

}  // namespace
}  // namespace kubicle::e2e
