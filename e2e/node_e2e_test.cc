// e2e of the node side: real kubicle-node daemons (NodeProcess) running the
// test guest on this machine's KVM, the real kubicle-operator and the real
// control plane. Apply -> Running -> exec -> delete with the finalizer held
// until teardown, forks, TTL, sweeps by run label, the node SIGKILLed mid
// fan-out, a Sandbox deleted while its node is down, two nodes, a template
// outside the image roots, the apiserver restarted. Nothing may be left on
// the host afterwards: VMM processes, sockets, sandbox directories, cgroups.
// Timeouts are generous (a slow 2-core nested VM); no timing is asserted.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>

#include "e2e/e2e_env.h"
#include "kube/resource.h"

namespace kubicle::e2e {
namespace {

using namespace std::chrono_literals;

class NodeE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    c = NewClient();
    ns = TestNamespace(c.get());
  }
  void TearDown() override {
    if (c && operator_) CleanUpNamespace(c.get(), ns);
    if (HasFailure()) {
      for (auto& n : nodes) std::cerr << "--- " << n->log_path() << " (tail) ---\n" << n->LogTail() << "\n";
      if (operator_) std::cerr << "operator log: " << operator_->log_path << "\n";
    }
    if (operator_) operator_->Stop();
    nodes.clear();
  }

  // A node named <ns>-<suffix>.
  NodeProcess* StartNode(const std::string& suffix, NodeOptions o = {}) {
    auto n = NodeProcess::Start(ns + "-" + suffix, std::move(o));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    if (!n.ok()) return nullptr;
    nodes.push_back(std::move(*n));
    return nodes.back().get();
  }
  void StartOperator(const std::string& extra_flag = {}) {
    auto op = OperatorProcess::Start(ns, 0, extra_flag);
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    operator_ = std::move(*op);
  }
  // Template `name` of the test guest, Ready on every node of the test.
  void Template(const std::string& name = "tg") {
    TemplateOptions t;
    t.warmup = {{"echo", "warm"}};
    ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, name, t).ok());
    for (auto& n : nodes) ASSERT_TRUE(WaitTemplateReady(c.get(), ns, name, n->name())) << n->LogTail();
  }
  void Create(const std::string& name, const std::map<std::string, std::string>& labels = {},
              const std::function<void(Json*)>& edit = {}) {
    Json s = SandboxManifest(name, "tg", labels);
    if (edit) edit(&s);
    auto r = c->Create(kube::SandboxResource(), ns, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::optional<Json> Get(const std::string& name) {
    auto g = c->Get(kube::SandboxResource(), ns, name);
    return g.ok() ? std::optional<Json>(*g) : std::nullopt;
  }
  std::vector<Json> List(const std::string& selector = {}) {
    kube::ListOptions o;
    o.label_selector = selector;
    auto l = c->List(kube::SandboxResource(), ns, o);
    std::vector<Json> out;
    if (l.ok()) for (const Json& i : (*l)["items"]) out.push_back(i);
    return out;
  }
  bool WaitRunning(const std::vector<std::string>& names, std::chrono::seconds timeout = 180s) {
    return Eventually([&] {
      for (const auto& n : names) {
        auto s = Get(n);
        if (!s || Phase(*s) != "Running" || VmState(*s) != "Running") return false;
      }
      return true;
    }, timeout);
  }
  NodeProcess* NodeNamed(const std::string& name) {
    for (auto& n : nodes) if (n->name() == name) return n.get();
    return nullptr;
  }
  ProcessId VmOf(const std::string& sandbox) {
    auto s = Get(sandbox);
    NodeProcess* n = s ? NodeNamed(LabelOf(*s, "kubicle.dev/node")) : nullptr;
    if (!n) {
      ADD_FAILURE() << sandbox << " is not on a node of this test";
      return {};
    }
    auto p = n->VmProcess(VmId(*s));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : ProcessId{};
  }
  // Nothing but idle pool VMs is left on `n` (eventually: teardown is async).
  void ExpectNothingLeft(NodeProcess* n, std::chrono::seconds timeout = 120s) {
    EXPECT_TRUE(Eventually([&] {
      return n->Leftovers().empty() && n->VmmPids().size() <= 1 &&  // pool size 1
             n->NetnsFiles() <= size_t(NodeProcess::kSandboxNetworkPool);  // the pooled slots
    }, timeout)) << n->name() << " left " << n->Leftovers().ToString() << "; " << n->VmmPids().size()
                 << " VMM processes, " << n->NetnsFiles() << " network namespaces";
  }
  // `n` runs exactly the VMs `want` (node ids), each once, and idle pool VMs.
  void ExpectExactlyTheseVms(NodeProcess* n, std::vector<std::string> want) {
    std::sort(want.begin(), want.end());
    std::set<std::string> wanted(want.begin(), want.end());
    std::string why;
    EXPECT_TRUE(Eventually([&] {
      int pool = 0;
      for (const auto& [pid, group] : n->VmmGroups()) {
        if (group.rfind("pool-", 0) == 0) {
          ++pool;
        } else if (!wanted.count(group)) {
          why = "VMM " + std::to_string(pid) + " in \"" + group + "\" is none of them";
          return false;
        }
      }
      if (pool > 1) {
        why = std::to_string(pool) + " idle pool VMs";
        return false;
      }
      auto have = n->SandboxVms();
      why = std::to_string(have.size()) + " sandbox VMs for " + std::to_string(want.size());
      return have == want;
    }, 120s)) << why;
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  std::vector<std::unique_ptr<NodeProcess>> nodes;
  std::unique_ptr<OperatorProcess> operator_;
};

// Watches one Sandbox until it is deleted and checks, at the moment the node
// reports Terminated and at the moment the object disappears, whether its
// VM process is still alive.
class DeletionWatch {
 public:
  DeletionWatch(kube::KubeClient* c, const std::string& ns, const Json& sandbox, ProcessId vm) : vm_(vm) {
    kube::WatchOptions o;
    o.field_selector = "metadata.name=" + sandbox["metadata"]["name"].get<std::string>();
    o.resource_version = sandbox["metadata"]["resourceVersion"].get<std::string>();
    thread_ = std::thread([this, c, ns, o] {
      (void)c->Watch(kube::SandboxResource(), ns, o, [this](const kube::WatchEvent& e) {
        if (!saw_terminated_ && VmState(e.object) == "Terminated") {
          alive_at_terminated_ = Alive(vm_);
          saw_terminated_ = true;
        }
        if (e.type != kube::WatchEventType::kDeleted) return true;
        alive_at_delete_ = Alive(vm_);
        deleted_ = true;
        return false;
      }, cancel_);
    });
  }
  ~DeletionWatch() {
    cancel_.Cancel();
    thread_.join();
  }
  bool deleted() const { return deleted_; }
  bool saw_terminated() const { return saw_terminated_; }
  bool alive_at_terminated() const { return alive_at_terminated_; }
  bool alive_at_delete() const { return alive_at_delete_; }

 private:
  ProcessId vm_;
  kube::CancelToken cancel_;
  std::atomic<bool> deleted_{false}, saw_terminated_{false}, alive_at_terminated_{false},
      alive_at_delete_{false};
  std::thread thread_;
};

TEST_F(NodeE2E, ApplyRunExecDeleteLeavesNothing) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  ASSERT_NO_FATAL_FAILURE(Create("s1", {{"kubicle.dev/run", "r1"}}, [](Json* s) {
    (*s)["spec"]["env"] = Json::array({{{"name", "GREETING"}, {"value", "hello from spec.env"}}});
  }));
  ASSERT_TRUE(WaitRunning({"s1"})) << Get("s1")->dump();
  Json s = *Get("s1");
  EXPECT_EQ(s["status"]["vm"]["endpoint"], node->endpoint());
  EXPECT_EQ(LabelOf(s, "kubicle.dev/node"), node->name());

  auto echo = ExecInSandbox(c.get(), ns, "s1", {"echo", "hello", "node"});
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ((*echo)["exitCode"], 0);
  EXPECT_EQ((*echo)["stdout"], "hello node\n");
  auto env = ExecInSandbox(c.get(), ns, "s1", {"printenv", "GREETING"});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ((*env)["stdout"], "hello from spec.env\n");

  // The VM, seen from the host: one process in the sandbox's own cgroup.
  EXPECT_EQ(node->SandboxVms(), std::vector<std::string>{VmId(s)});
  EXPECT_EQ(node->Leftovers().sandbox_dirs, std::vector<std::string>{VmId(s)});
  const auto cgroups = node->Leftovers().cgroups;
  EXPECT_NE(std::find(cgroups.begin(), cgroups.end(), VmId(s)), cgroups.end())
      << "its cgroup under " << node->CgroupParent();
  ProcessId vm = VmOf("s1");
  ASSERT_TRUE(Alive(vm));
  // The sandbox network is on by default: the VM has a namespace of its
  // own, the default egress policy and a MAC of its own.
  auto on_node = node->Admin("GET", "/v1/sandboxes/" + VmId(s));
  ASSERT_TRUE(on_node.ok()) << on_node.status().ToString();
  ASSERT_TRUE((*on_node)["network"].is_object()) << on_node->dump();
  EXPECT_EQ((*on_node)["network"]["egress"], "internet") << on_node->dump();
  EXPECT_EQ((*on_node)["network"]["mac"].get<std::string>().size(), 17u) << on_node->dump();

  {
    DeletionWatch watch(c.get(), ns, s, vm);
    ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
    ASSERT_TRUE(Eventually([&] { return watch.deleted(); }, 120s)) << "the finalizer was never removed";
    EXPECT_TRUE(watch.saw_terminated()) << "the node reports Terminated before the object goes";
    EXPECT_FALSE(watch.alive_at_terminated()) << "Terminated is reported after the teardown";
    EXPECT_FALSE(watch.alive_at_delete()) << "the finalizer is removed only after the teardown";
  }
  EXPECT_FALSE(Alive(vm));
  ExpectNothingLeft(node);
}

// spec.suspend through the apiserver (docs/node.md, "Suspend and resume"):
// true -> phase Suspended, the VM process gone, its snapshot on the node;
// false -> Running again, every file written before each suspend reads
// back. Two cycles, so a bug that loses files at the second resume shows.
TEST_F(NodeE2E, SpecSuspendParksTheVmAndResumeKeepsItsFiles) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  ASSERT_NO_FATAL_FAILURE(Create("s1", {{"kubicle.dev/run", "r1"}}));
  ASSERT_TRUE(WaitRunning({"s1"})) << Get("s1")->dump();
  const std::string id = VmId(*Get("s1"));
  auto set_suspend = [&](bool v) {
    auto r = c->Patch(kube::SandboxResource(), ns, "s1", kube::PatchType::kMerge,
                      Json{{"spec", {{"suspend", v}}}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  };
  auto condition = [](const Json& s, const std::string& type) {
    for (const Json& cnd : s["status"]["conditions"])
      if (cnd["type"] == type) return cnd;
    return Json();
  };
  for (int cycle = 0; cycle < 2; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    {
      auto dp = SandboxDataPlane::Open(c.get(), ns, "s1");
      ASSERT_TRUE(dp.ok()) << dp.status().ToString();
      ASSERT_TRUE((*dp)->PutFile("/kept-" + std::to_string(cycle), "written before suspend " +
                                 std::to_string(cycle)).ok());
    }
    ProcessId vm = VmOf("s1");
    ASSERT_TRUE(Alive(vm));
    ASSERT_NO_FATAL_FAILURE(set_suspend(true));
    ASSERT_TRUE(Eventually([&] {
      auto s = Get("s1");
      return s && Phase(*s) == "Suspended" && VmState(*s) == "Suspended";
    }, 120s)) << Get("s1")->dump();
    Json s = *Get("s1");
    EXPECT_EQ(condition(s, "Suspended")["status"], "True") << s.dump();
    EXPECT_EQ(condition(s, "Ready")["reason"], "Suspended");
    EXPECT_EQ(LabelOf(s, "kubicle.dev/node"), node->name()) << "a suspended Sandbox stays on its node";
    EXPECT_TRUE(Eventually([&] { return !Alive(vm); }, 30s)) << "the VM process outlived the suspend";
    EXPECT_TRUE(node->SandboxVms().empty());
    EXPECT_EQ(node->Leftovers().sandbox_dirs, std::vector<std::string>{id}) << "its snapshot stays on the node";
    auto refused = ExecInSandbox(c.get(), ns, "s1", {"echo", "hi"});
    EXPECT_FALSE(refused.ok()) << "no exec while suspended";

    ASSERT_NO_FATAL_FAILURE(set_suspend(false));
    ASSERT_TRUE(WaitRunning({"s1"}, 120s)) << Get("s1")->dump();
    EXPECT_EQ(condition(*Get("s1"), "Suspended")["reason"], "Resumed");
    EXPECT_EQ(VmId(*Get("s1")), id);
    auto dp = SandboxDataPlane::Open(c.get(), ns, "s1");
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    for (int k = 0; k <= cycle; ++k) {
      auto f = (*dp)->GetFile("/kept-" + std::to_string(k));
      ASSERT_TRUE(f.ok()) << "file of cycle " << k << ": " << f.status().ToString();
      EXPECT_EQ(*f, "written before suspend " + std::to_string(k));
    }
  }
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  EXPECT_TRUE(Eventually([&] { return !Get("s1"); }, 120s));
  ExpectNothingLeft(node);
}

TEST_F(NodeE2E, ForkOfFiveRunsOnTheSourceNodeWithPrivateFiles) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  ASSERT_NO_FATAL_FAILURE(Create("src"));
  ASSERT_TRUE(WaitRunning({"src"}));
  auto src = SandboxDataPlane::Open(c.get(), ns, "src");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_TRUE((*src)->PutFile("/before-fork", "from the source").ok());

  Json fork = {{"metadata", {{"name", "f"}}}, {"spec", {{"sourceRef", {{"name", "src"}}}, {"replicas", 5}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(Eventually([&] {
    auto f = c->Get(kube::SandboxForkResource(), ns, "f");
    return f.ok() && (*f).value("status", Json::object()).value("readyReplicas", 0) == 5;
  }, 180s)) << "see " << node->log_path();
  auto children = List("kubicle.dev/fork-of=f");
  ASSERT_EQ(children.size(), 5u);
  std::vector<std::string> vms = {VmId(*Get("src"))};
  for (const Json& ch : children) {
    EXPECT_EQ(LabelOf(ch, "kubicle.dev/node"), node->name()) << "a child runs on its source's node";
    EXPECT_EQ(VmState(ch), "Running");
    vms.push_back(VmId(ch));
  }
  ExpectExactlyTheseVms(node, vms);

  std::map<std::string, std::unique_ptr<SandboxDataPlane>> dp;
  for (int i = 0; i < 5; ++i) {
    const std::string n = "f-" + std::to_string(i);
    auto d = SandboxDataPlane::Open(c.get(), ns, n);
    ASSERT_TRUE(d.ok()) << n << ": " << d.status().ToString();
    auto before = (*d)->GetFile("/before-fork");
    ASSERT_TRUE(before.ok()) << n << ": " << before.status().ToString();
    EXPECT_EQ(*before, "from the source") << n << " starts as a copy of its source";
    dp[n] = std::move(*d);
  }
  ASSERT_TRUE(dp["f-0"]->PutFile("/only-in-f-0", "mine").ok());
  EXPECT_EQ(*dp["f-0"]->GetFile("/only-in-f-0"), "mine");
  EXPECT_EQ(dp["f-1"]->GetFile("/only-in-f-0").status().code(), StatusCode::kNotFound)
      << "a child's files are private";
  EXPECT_EQ((*src)->GetFile("/only-in-f-0").status().code(), StatusCode::kNotFound)
      << "and the source does not see them";
  auto hello = dp["f-4"]->Exec({"echo", "from", "f-4"});
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_EQ((*hello)["stdout"], "from f-4\n");
}

TEST_F(NodeE2E, TtlExpiryKillsTheVm) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  // Long enough to be seen Running on this slow machine first.
  ASSERT_NO_FATAL_FAILURE(Create("short", {}, [](Json* s) { (*s)["spec"]["ttlSeconds"] = 20; }));
  ASSERT_TRUE(WaitRunning({"short"}));
  ProcessId vm = VmOf("short");
  ASSERT_TRUE(Alive(vm));
  ASSERT_TRUE(Eventually([&] { return !Get("short"); }, 180s)) << "never expired";
  EXPECT_FALSE(Alive(vm)) << "the VM is torn down before the object goes";
  ExpectNothingLeft(node);
}

TEST_F(NodeE2E, SweepByRunLabelKillsEveryVmOfTheRun) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Create("x" + std::to_string(i), {{"kubicle.dev/run", "sweep"}}));
  ASSERT_NO_FATAL_FAILURE(Create("keep", {{"kubicle.dev/run", "keep"}}));
  ASSERT_TRUE(WaitRunning({"x0"}));
  Json fork = {{"metadata", {{"name", "xf"}, {"labels", {{"kubicle.dev/run", "sweep"}}}}},
               {"spec", {{"sourceRef", {{"name", "x0"}}}, {"replicas", 2}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  const std::vector<std::string> run = {"x0", "x1", "x2", "xf-0", "xf-1"};
  ASSERT_TRUE(WaitRunning({"x0", "x1", "x2", "xf-0", "xf-1", "keep"}));
  std::vector<ProcessId> vms;
  for (const auto& n : run) vms.push_back(VmOf(n));
  ProcessId kept = VmOf("keep");

  auto del = Cluster()->Kubectl({"delete", "sandboxes,sandboxforks", "-n", ns, "-l", "kubicle.dev/run=sweep",
                                 "--wait=false"});
  ASSERT_TRUE(del.ok());
  ASSERT_EQ(del->exit_code, 0) << del->output;
  EXPECT_TRUE(Eventually([&] {
    auto forks = c->List(kube::SandboxForkResource(), ns, {});
    return List("kubicle.dev/run=sweep").empty() && forks.ok() && (*forks)["items"].empty();
  }, 180s));
  for (size_t i = 0; i < vms.size(); ++i) {
    EXPECT_TRUE(Eventually([&] { return !Alive(vms[i]); }, 60s)) << run[i] << "'s VM survived the sweep";
  }
  EXPECT_TRUE(Alive(kept)) << "another run is untouched";
  auto e = ExecInSandbox(c.get(), ns, "keep", {"true"});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)["exitCode"], 0);
  ExpectExactlyTheseVms(node, {VmId(*Get("keep"))});
}

TEST_F(NodeE2E, NodeKilledMidFanOutConvergesWithoutDuplicatesOrOrphans) {
  constexpr int kN = 50;
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  std::vector<std::string> names;
  for (int i = 0; i < kN; ++i) names.push_back("fan" + std::to_string(i));
  for (int i = 0; i < kN / 2; ++i) ASSERT_NO_FATAL_FAILURE(Create(names[i], {{"kubicle.dev/run", "fan"}}));
  ASSERT_TRUE(Eventually([&] {
    int running = 0;
    for (const Json& s : List("kubicle.dev/run=fan")) running += VmState(s) == "Running";
    return running >= 3;
  }, 180s));
  node->Kill();  // SIGKILL mid fan-out: restores in flight, reports unwritten
  for (int i = kN / 2; i < kN; ++i) ASSERT_NO_FATAL_FAILURE(Create(names[i], {{"kubicle.dev/run", "fan"}}));
  ASSERT_TRUE(node->Restart().ok()) << node->LogTail();

  EXPECT_TRUE(WaitRunning(names, 300s)) << [&] {
    std::string out;
    for (const Json& s : List("kubicle.dev/run=fan")) {
      if (VmState(s) == "Running") continue;
      out += s["metadata"]["name"].get<std::string>() + "=" + VmState(s) + " (" +
             s.value("status", Json::object()).value("vm", Json::object()).value("message", "") + ") ";
    }
    return "not Running: " + out;
  }();
  std::vector<std::string> want;
  for (const auto& n : names) want.push_back(VmId(*Get(n)));
  ExpectExactlyTheseVms(node, want);
  auto listed = node->Admin("GET", "/v1/sandboxes");
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  std::vector<std::string> ids;
  for (const Json& vm : (*listed)["items"]) ids.push_back(vm.value("id", ""));
  std::sort(ids.begin(), ids.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(ids, want) << "the node's own view: every Sandbox once, nothing else";
  auto dirs = node->Leftovers().sandbox_dirs;
  std::sort(dirs.begin(), dirs.end());
  EXPECT_EQ(dirs, want);
}

TEST_F(NodeE2E, SandboxDeletedWhileItsNodeIsDownIsReapedWhenItReturns) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator("--node-gone-grace-seconds=5"));
  ASSERT_NO_FATAL_FAILURE(Template());
  ASSERT_NO_FATAL_FAILURE(Create("s1"));
  ASSERT_TRUE(WaitRunning({"s1"}));
  ProcessId vm = VmOf("s1");
  node->Kill();
  ASSERT_TRUE(Alive(vm)) << "VMs outlive their node daemon";
  ASSERT_TRUE(c->Delete(kube::SandboxResource(), ns, "s1").ok());
  // The Lease (10 s) expires, the grace (5 s) passes, the operator lets go.
  ASSERT_TRUE(Eventually([&] { return !Get("s1"); }, 180s)) << "the operator never removed the finalizer";
  EXPECT_TRUE(Alive(vm)) << "nobody could tear it down while the node was down";
  ASSERT_TRUE(node->Restart().ok()) << node->LogTail();
  EXPECT_TRUE(Eventually([&] { return !Alive(vm); }, 180s)) << "the returning node never reaped it";
  ExpectNothingLeft(node);
}

TEST_F(NodeE2E, TwoNodesShareTheLoadAndAForkChildFollowsItsSource) {
  NodeProcess* a = StartNode("a");
  NodeProcess* b = StartNode("b");
  ASSERT_TRUE(a && b);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  std::vector<std::string> names;
  for (int i = 0; i < 6; ++i) {
    names.push_back("s" + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(Create(names.back()));
  }
  ASSERT_TRUE(WaitRunning(names));
  std::map<std::string, std::vector<std::string>> by_node;
  std::map<std::string, std::string> source_on;
  for (const auto& n : names) {
    Json s = *Get(n);
    by_node[LabelOf(s, "kubicle.dev/node")].push_back(VmId(s));
    source_on[LabelOf(s, "kubicle.dev/node")] = n;
    EXPECT_EQ(s["status"]["vm"]["endpoint"], NodeNamed(LabelOf(s, "kubicle.dev/node"))->endpoint());
  }
  ASSERT_EQ(by_node.size(), 2u) << "both nodes get Sandboxes";
  EXPECT_FALSE(by_node[a->name()].empty());
  EXPECT_FALSE(by_node[b->name()].empty());

  // Fork a Sandbox of the node the scheduler would not pick first.
  const std::string src = source_on[b->name()];
  Json fork = {{"metadata", {{"name", "f"}}}, {"spec", {{"sourceRef", {{"name", src}}}, {"replicas", 2}}}};
  ASSERT_TRUE(c->Create(kube::SandboxForkResource(), ns, fork).ok());
  ASSERT_TRUE(WaitRunning({"f-0", "f-1"}));
  for (const char* ch : {"f-0", "f-1"}) {
    Json s = *Get(ch);
    EXPECT_EQ(LabelOf(s, "kubicle.dev/node"), b->name());
    by_node[b->name()].push_back(VmId(s));
  }
  ExpectExactlyTheseVms(a, by_node[a->name()]);
  ExpectExactlyTheseVms(b, by_node[b->name()]);
}

// A node that stops heartbeating (SIGKILLed; its VMs are left running, as a
// crashed host's would be unreachable) has its Sandboxes failed once its
// Lease (10 s) has expired and the grace (5 s) has passed, with the reason;
// Sandboxes created afterwards go to the node that is alive.
TEST_F(NodeE2E, ADeadNodesSandboxesFailAfterTheGraceAndNewOnesGoElsewhere) {
  NodeProcess* a = StartNode("a");
  NodeProcess* b = StartNode("b");
  ASSERT_TRUE(a && b);
  ASSERT_NO_FATAL_FAILURE(StartOperator("--node-gone-grace-seconds=5"));
  ASSERT_NO_FATAL_FAILURE(Template());
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    names.push_back("s" + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(Create(names.back()));
  }
  ASSERT_TRUE(WaitRunning(names));
  std::vector<std::string> on_a;
  for (const auto& n : names) {
    if (LabelOf(*Get(n), "kubicle.dev/node") == a->name()) on_a.push_back(n);
  }
  ASSERT_FALSE(on_a.empty()) << "the scheduler spreads four Sandboxes over two nodes";
  a->Kill();

  std::string why;
  ASSERT_TRUE(Eventually([&] {
    for (const auto& n : on_a) {
      auto s = Get(n);
      if (!s || Phase(*s) != "Failed") {
        why = n + " is " + (s ? Phase(*s) : "gone");
        return false;
      }
    }
    return true;
  }, 120s)) << why;
  for (const auto& n : on_a) {
    Json s = *Get(n);
    bool lost = false;
    for (const Json& cnd : s["status"].value("conditions", Json::array())) {
      if (cnd.value("type", "") == "Ready" && cnd.value("reason", "") == "NodeLost") {
        lost = true;
        EXPECT_NE(cnd.value("message", "").find(a->name()), std::string::npos) << cnd.dump();
      }
    }
    EXPECT_TRUE(lost) << n << ": " << s["status"].dump();
  }
  for (const auto& n : names) {
    if (std::find(on_a.begin(), on_a.end(), n) == on_a.end()) {
      EXPECT_EQ(Phase(*Get(n)), "Running") << n << " on the live node is untouched";
    }
  }
  std::vector<std::string> later = {"late-0", "late-1", "late-2"};
  for (const auto& n : later) ASSERT_NO_FATAL_FAILURE(Create(n));
  ASSERT_TRUE(WaitRunning(later));
  for (const auto& n : later) EXPECT_EQ(LabelOf(*Get(n), "kubicle.dev/node"), b->name()) << n;
}

TEST_F(NodeE2E, TemplateOutsideTheImageRootsFailsWithTheReason) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  TemplateOptions t;
  t.kernel = "/etc/passwd";
  ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, "bad", t).ok());
  Json entry;
  EXPECT_TRUE(Eventually([&] {
    auto tm = c->Get(kube::SandboxTemplateResource(), ns, "bad");
    if (!tm.ok()) return false;
    entry = TemplateNodeEntry(*tm, node->name());
    return entry.is_object() && entry.value("phase", "") == "Failed";
  }, 120s)) << entry.dump();
  EXPECT_NE(entry.value("message", "").find("/etc/passwd"), std::string::npos) << entry.dump();
  EXPECT_NE(entry.value("message", "").find("image roots"), std::string::npos) << entry.dump();
  EXPECT_EQ(entry.value("observedGeneration", 0), 1);
  EXPECT_TRUE(Eventually([&] {
    auto tm = c->Get(kube::SandboxTemplateResource(), ns, "bad");
    return tm.ok() && Phase(*tm) == "Failed";
  })) << "the operator's aggregate";
}

TEST_F(NodeE2E, ApiserverRestartKeepsVmsRunningAndStatusesCatchUp) {
  NodeProcess* node = StartNode("a");
  ASSERT_NE(node, nullptr);
  ASSERT_NO_FATAL_FAILURE(StartOperator());
  ASSERT_NO_FATAL_FAILURE(Template());
  ASSERT_NO_FATAL_FAILURE(Create("keeps"));
  ASSERT_NO_FATAL_FAILURE(Create("dies"));
  ASSERT_TRUE(WaitRunning({"keeps", "dies"}));
  ProcessId keeps = VmOf("keeps"), dies = VmOf("dies");
  auto dp = SandboxDataPlane::Open(c.get(), ns, "keeps");
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  // While the apiserver restarts: one VM dies (its Failed report must wait
  // for the apiserver) and the other serves an exec (the data plane needs no
  // apiserver).
  Result<Json> during = Status::Unavailable("not run");
  std::thread meanwhile([&] {
    std::this_thread::sleep_for(300ms);
    ::kill(dies.pid, SIGKILL);
    during = (*dp)->Exec({"echo", "still", "here"});
  });
  Status restarted = Cluster()->RestartApiserver();
  meanwhile.join();
  ASSERT_TRUE(restarted.ok()) << restarted.ToString();
  ASSERT_TRUE(during.ok()) << during.status().ToString();
  EXPECT_EQ((*during)["stdout"], "still here\n");
  EXPECT_TRUE(Alive(keeps));
  EXPECT_TRUE(Eventually([&] {
    auto s = Get("dies");
    return s && VmState(*s) == "Failed" && Phase(*s) == "Failed";
  }, 180s)) << "the node's report of the dead VM catches up: " << Get("dies")->dump();
  ASSERT_NO_FATAL_FAILURE(Create("after"));
  EXPECT_TRUE(WaitRunning({"after", "keeps"}));
  auto e = ExecInSandbox(c.get(), ns, "after", {"echo", "after"});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)["stdout"], "after\n");
}

}  // namespace
}  // namespace kubicle::e2e
