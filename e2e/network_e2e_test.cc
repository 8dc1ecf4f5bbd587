// e2e of egress policies (docs/network.md, "Policy") through Kubernetes:
// spec.network of a Sandbox, else of its SandboxTemplate, applied with the
// real apiserver and operator, reaches the real kubicle-node that runs the
// VM (its sandbox network on, the default). What is asserted is what the
// node enforces, read where the kernel reads it: the nftables table `ip
// kubicle` inside each Sandbox's own network namespace (the namespace file
// its record names), whose chain `egress` every new connection from the
// guest's TAP goes through. The test guest never opens a connection of its
// own (docs/testguest.md: it only answers ARP and ping), so no packet
// tests these rules here; the linux tier does that with a real guest
// (e2e/nested/node-network-test.py). Also: spec.network is immutable (the
// CRD's CEL rule), a fork child keeps its source's policy, and a policy the
// node refuses fails the Sandbox with the reason.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "common/base64.h"
#include "e2e/e2e_env.h"
#include "kube/json_fields.h"
#include "kube/resource.h"
#include "noderuntime/client/node_client.h"

namespace kubicle::e2e {
namespace {

using namespace std::chrono_literals;

class NetworkE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    KUBICLE_REQUIRE_CLUSTER();
    KUBICLE_REQUIRE_KVM();
    c = NewClient();
    ns = TestNamespace(c.get());
    auto op = OperatorProcess::Start(ns);
    ASSERT_TRUE(op.ok()) << op.status().ToString();
    operator_ = std::move(*op);
    auto n = NodeProcess::Start(ns + "-n");
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    node = std::move(*n);
  }
  void TearDown() override {
    if (c && operator_) CleanUpNamespace(c.get(), ns);
    if (HasFailure() && node) std::cerr << "--- node log (tail) ---\n" << node->LogTail() << "\n";
    if (operator_) operator_->Stop();
    node.reset();
  }

  void Template(const std::string& name, const Json& network = nullptr) {
    TemplateOptions t;
    t.warmup = {{"echo", "warm"}};
    t.network = network;
    ASSERT_TRUE(CreateTestGuestTemplate(c.get(), ns, name, t).ok());
  }
  void Create(const std::string& name, const std::string& tmpl, const Json& network = nullptr) {
    Json s = SandboxManifest(name, tmpl);
    if (!network.is_null()) s["spec"]["network"] = network;
    auto r = c->Create(kube::SandboxResource(), ns, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::optional<Json> Get(const std::string& name) {
    auto g = c->Get(kube::SandboxResource(), ns, name);
    return g.ok() ? std::optional<Json>(*g) : std::nullopt;
  }
  bool WaitRunning(const std::string& name) {
    return Eventually([&] {
      auto s = Get(name);
      return s && Phase(*s) == "Running" && VmState(*s) == "Running";
    }, 180s);
  }

  // The node's record of a Sandbox's VM (docs/node.md, "State").
  Json Record(const std::string& name) {
    auto s = Get(name);
    if (!s) return nullptr;
    std::ifstream f(node->state_dir() + "/sandboxes/" + VmId(*s) + "/record.json");
    return Json::parse(f, nullptr, false);
  }
  // `nft list ARGS...` inside the namespace file `netns`; "" when that
  // fails, which fails the test if `must`.
  std::string NftIn(const std::string& netns, const std::vector<std::string>& args, bool must = true) {
    std::vector<std::string> argv = {"nsenter", "--net=" + netns, "nft", "list"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunCommand(argv, {}, 60s);
    if (must) {
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) {
        EXPECT_EQ(r->exit_code, 0) << r->output;
      }
    }
    return r.ok() && r->exit_code == 0 ? r->output : "";
  }
  // The rules of chain `egress` in a Sandbox's namespace, one per line,
  // trimmed, split into the never-list ("ip daddr X reject", which comes
  // first in every policy) and the rest: the policy's own.
  struct Egress {
    std::vector<std::string> never, policy;
  };
  Egress EgressOf(const std::string& name) {
    Json rec = Record(name);
    const std::string netns = kube::StrAt(rec, {"network", "netns"});
    EXPECT_FALSE(netns.empty()) << name << "'s record has no namespace: " << rec.dump();
    return netns.empty() ? Egress{} : EgressIn(netns);
  }
  // `must` false: a namespace being built or torn down reads as empty.
  Egress EgressIn(const std::string& netns, bool must = true) {
    Egress e;
    std::istringstream in(NftIn(netns, {"chain", "ip", "kubicle", "egress"}, must));
    std::string line;
    while (std::getline(in, line)) {
      line.erase(0, line.find_first_not_of(" \t"));
      if (line.empty() || line.rfind("table ", 0) == 0 || line.rfind("chain ", 0) == 0 || line == "}") continue;
      const bool never = line.rfind("ip daddr ", 0) == 0 && line.size() > 7 &&
                         line.compare(line.size() - 7, 7, " reject") == 0 && e.policy.empty();
      (never ? e.never : e.policy).push_back(line);
    }
    return e;
  }
  void ExpectNeverList(const std::string& name, const Egress& e) {
    for (const char* never : {"ip daddr 0.0.0.0/8 reject", "ip daddr 127.0.0.0/8 reject",
                              "ip daddr 169.254.0.0/16 reject", "ip daddr 224.0.0.0/4 reject",
                              "ip daddr 240.0.0.0/4 reject"}) {
      EXPECT_NE(std::find(e.never.begin(), e.never.end(), never), e.never.end())
          << name << " lacks " << never;
    }
  }

  std::unique_ptr<kube::HttpKubeClient> c;
  std::string ns;
  std::unique_ptr<OperatorProcess> operator_;
  std::unique_ptr<NodeProcess> node;
};

TEST_F(NetworkE2E, EachSandboxsPolicyIsTheRulesetOfItsOwnNamespace) {
  const Json none = {{"egress", "none"}};
  const Json allow = {{"egress", {{"allow", {{{"cidr", "198.51.100.0/24"}, {"ports", {8080, 443}}},
                                             {{"cidr", "203.0.113.7/32"}}}}}}};
  ASSERT_NO_FATAL_FAILURE(Template("open"));
  ASSERT_NO_FATAL_FAILURE(Template("closed", none));
  for (const char* t : {"open", "closed"}) {
    ASSERT_TRUE(WaitTemplateReady(c.get(), ns, t, node->name())) << node->LogTail();
  }
  ASSERT_NO_FATAL_FAILURE(Create("inet", "open"));
  ASSERT_NO_FATAL_FAILURE(Create("none", "open", none));
  ASSERT_NO_FATAL_FAILURE(Create("allow", "open", allow));
  ASSERT_NO_FATAL_FAILURE(Create("inherit", "closed"));  // the template's: none
  ASSERT_NO_FATAL_FAILURE(Create("own", "closed", {{"egress", "internet"}}));  // its own wins
  for (const char* s : {"inet", "none", "allow", "inherit", "own"}) {
    ASSERT_TRUE(WaitRunning(s)) << s << ": " << Get(s).value_or(Json()).dump();
  }

  std::set<std::string> namespaces;
  std::map<std::string, Egress> egress;
  for (const char* s : {"inet", "none", "allow", "inherit", "own"}) {
    SCOPED_TRACE(s);
    namespaces.insert(kube::StrAt(Record(s), {"network", "netns"}));
    egress[s] = EgressOf(s);
    ExpectNeverList(s, egress[s]);
    // Every new connection from the guest's TAP goes through `egress`,
    // anything else forwarded is dropped.
    const std::string table = NftIn(kube::StrAt(Record(s), {"network", "netns"}), {"table", "ip", "kubicle"});
    EXPECT_NE(table.find("iifname \"tap0\" oifname \"veth0\" jump egress"), std::string::npos) << table;
    EXPECT_NE(table.find("type filter hook forward priority filter; policy drop;"), std::string::npos) << table;
  }
  EXPECT_EQ(namespaces.size(), 5u) << "each Sandbox has a namespace of its own";
  // The sandbox CIDR of this node (every other sandbox) is on each never-list.
  for (const auto& [s, e] : egress) EXPECT_EQ(e.never, egress["inet"].never) << s;

  EXPECT_EQ(egress["inet"].policy, (std::vector<std::string>{"accept", "reject"}));
  EXPECT_EQ(egress["own"].policy, (std::vector<std::string>{"accept", "reject"}));
  EXPECT_EQ(egress["none"].policy, std::vector<std::string>{"reject"});
  EXPECT_EQ(egress["inherit"].policy, std::vector<std::string>{"reject"});
  EXPECT_EQ(egress["allow"].policy,
            (std::vector<std::string>{"ip daddr 198.51.100.0/24 meta l4proto { tcp, udp } th dport { 443, 8080 } accept",
                                      "ip daddr 203.0.113.7 accept", "reject"}));
  // The node reports the policy it applied, canonical.
  auto info = node->Admin("GET", "/v1/sandboxes/" + VmId(*Get("inherit")));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ((*info)["network"]["egress"], "none") << info->dump();

  // spec.network is immutable: the apiserver refuses a change.
  auto widened = c->Patch(kube::SandboxResource(), ns, "none", kube::PatchType::kMerge,
                          Json{{"spec", {{"network", {{"egress", "internet"}}}}}});
  EXPECT_FALSE(widened.ok()) << "spec.network changed on a Sandbox";
  EXPECT_EQ(EgressOf("none").policy, std::vector<std::string>{"reject"});

  // A fork child runs in a namespace of its own with its source's policy.
  auto fork = c->Create(kube::SandboxForkResource(), ns,
                        Json{{"metadata", {{"name", "f"}}},
                             {"spec", {{"sourceRef", {{"name", "allow"}}}, {"replicas", 1}}}});
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  ASSERT_TRUE(WaitRunning("f-0")) << Get("f-0").value_or(Json()).dump();
  EXPECT_EQ(namespaces.count(kube::StrAt(Record("f-0"), {"network", "netns"})), 0u);
  EXPECT_EQ(EgressOf("f-0").policy, egress["allow"].policy);
}

TEST_F(NetworkE2E, APolicyTheNodeRefusesFailsTheSandboxWithTheReason) {
  ASSERT_NO_FATAL_FAILURE(Template("open"));
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "open", node->name())) << node->LogTail();
  // The CRD keeps egress free-form; the node checks it.
  ASSERT_NO_FATAL_FAILURE(Create("bad", "open", {{"egress", {{"allow", {{{"cidr", "198.51.100.7/24"}}}}}}}));
  ASSERT_TRUE(Eventually([&] {
    auto s = Get("bad");
    return s && Phase(*s) == "Failed";
  }, 120s)) << Get("bad").value_or(Json()).dump();
  Json s = *Get("bad");
  const std::string why = kube::StrAt(s, {"status", "vm", "message"});
  EXPECT_NE(why.find("198.51.100.7/24"), std::string::npos) << s.dump();
  EXPECT_TRUE(node->SandboxVms().empty());
  // A template's policy is checked by the node too: it fails the template.
  ASSERT_NO_FATAL_FAILURE(Template("badt", {{"egress", "everywhere"}}));
  Json entry;
  EXPECT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "badt");
    entry = t.ok() ? TemplateNodeEntry(*t, node->name()) : Json();
    return entry.is_object() && entry.value("phase", "") == "Failed";
  }, 120s)) << entry.dump();
  EXPECT_NE(entry.dump().find("everywhere"), std::string::npos) << entry.dump();
}

// A per-call run has its template's policy. A run's VM lives for one call,
// so the run is held still to be looked at: the idle pool VMM it will be
// restored into is stopped (SIGSTOP) before the run is sent; the node takes
// the run's namespace and applies the policy before it restores the VM
// (SandboxManager::StartRunVm), then waits on that VMM. Once a namespace
// of the node has the template's policy, SIGCONT lets the run finish.
TEST_F(NetworkE2E, APerCallRunHasItsTemplatesPolicy) {
  ASSERT_NO_FATAL_FAILURE(Template("closed", {{"egress", "none"}}));
  ASSERT_TRUE(WaitTemplateReady(c.get(), ns, "closed", node->name())) << node->LogTail();
  std::string token, node_template;
  ASSERT_TRUE(Eventually([&] {
    auto t = c->Get(kube::SandboxTemplateResource(), ns, "closed");
    auto s = c->Get(kube::SecretResource(), ns, "closed-run");
    if (!t.ok() || !s.ok() || kube::StrAt(*t, {"status", "runTokenSha256"}).empty()) return false;
    node_template = kube::StrAt(TemplateNodeEntry(*t, node->name()), {"nodeTemplate"});
    auto tok = Base64Decode(kube::StrAt(*s, {"data", "token"}));
    token = tok.ok() ? std::string(tok->begin(), tok->end()) : "";
    return !token.empty() && !node_template.empty();
  }, 60s)) << "no run token or node template";
  pid_t pool = -1;
  ASSERT_TRUE(Eventually([&] {
    for (const auto& [pid, group] : node->VmmGroups())
      if (group.rfind("pool-", 0) == 0) pool = pid;
    return pool > 0;
  }, 60s)) << "no idle pool VM";
  auto namespaces = [&] {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(node->state_dir() + "/netns", ec))
      out.push_back(e.path().string());
    return out;
  };
  auto with_policy = [&](const std::vector<std::string>& policy) {
    std::vector<std::string> out;
    for (const std::string& n : namespaces())
      if (EgressIn(n, false).policy == policy) out.push_back(n);
    return out;
  };
  const std::vector<std::string> internet = {"accept", "reject"}, none = {"reject"};
  // Until the run, every namespace of the node is an idle pooled slot,
  // built with the default.
  EXPECT_TRUE(Eventually([&] {
    auto all = namespaces();
    return !all.empty() && with_policy(internet).size() == all.size();
  }, 60s)) << "the pooled slots are not all built with the default";

  ASSERT_EQ(::kill(pool, SIGSTOP), 0);
  auto run = std::async(std::launch::async, [&]() -> Result<Json> {
    ASSIGN_OR_RETURN(auto client, noderuntime::client::NodeClient::Create(node->url(), token, node->ca_file()));
    return client->Call("POST", "/v1/templates/" + node_template + "/run", Json{{"argv", {"echo", "ran"}}});
  });
  std::vector<std::string> held;
  const bool seen = Eventually([&] {
    held = with_policy(none);
    return !held.empty();
  }, 30s);
  ::kill(pool, SIGCONT);
  EXPECT_TRUE(seen) << "no namespace of the node took the template's policy";
  EXPECT_EQ(held.size(), 1u);
  ASSERT_EQ(run.wait_for(120s), std::future_status::ready);
  auto r = run.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(kube::StrAt(*r, {"stdout"}), "ran\n") << r->dump();
  // The run's namespace goes with its VM.
  EXPECT_TRUE(Eventually([&] { return with_policy(none).empty(); }, 60s))
      << "a namespace kept the run's policy after it";
}

}  // namespace
}  // namespace kubicle::e2e
