// SandboxManager with the sandbox network on, over FakeVmmLauncher and
// FakeNetSystem: each create and fork child gets its own namespace and MAC
// and passes them to the VMM, a bake gets a NIC and the guest's addresses,
// every way a sandbox ends gives its slot back, and re-adoption keeps it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "noderuntime/network/fake_net_system.h"
#include "noderuntime/network/guest_network.h"
#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager.h"
#include "noderuntime/testing/eventually.h"
#include "noderuntime/testing/fake_vmm_launcher.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using network::EgressMode;
using network::EgressPolicy;
using network::testing::FakeNetSystem;
using testing::Eventually;
using testing::FakeVmmLauncher;
namespace fs = std::filesystem;

class SandboxManagerNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kn-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    state_dir_ = tmpl;
    kernel_ = state_dir_ + "-kernel";
    std::ofstream(kernel_) << "not a kernel: the fake boots anything";
    net_->SetRoutes("default via 192.0.2.1 dev eth0\n");
    net_->SetAddresses("2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n");
  }
  void TearDown() override {
    if (m_) m_->Shutdown(true);
    m_.reset();
    launcher_.reset();
    fs::remove_all(state_dir_);
    fs::remove(kernel_);
  }

  NodeConfig Config(bool network = true) {
    NodeConfig c;
    c.state_dir = state_dir_;
    c.vmm_binary = "kubicle-vmm";
    c.launcher = launcher_;
    c.capacity_mem_mib = 1024;
    c.capacity_vcpus = 16;
    c.pool_size_per_shape = 1;
    c.use_cgroups = false;
    c.clock = [this] { return std::chrono::system_clock::now() + std::chrono::seconds(clock_offset_s_.load()); };
    c.sweep_interval = 3600s;
    c.orphan_sweep_interval = 0s;
    c.agent_timeout = 5s;
    c.delete_grace = 1s;
    c.network.enabled = network;
    c.network.pool_size = net_pool_;
    c.network.system = net_;
    return c;
  }
  void Open(bool network = true) {
    auto m = SandboxManager::Open(Config(network), registry_);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(m).value();
  }
  void OpenAndBake(EgressPolicy egress = {}) {
    ASSERT_NO_FATAL_FAILURE(Open());
    TemplateSpec spec;
    spec.name = "tg";
    spec.kernel = kernel_;
    spec.mem_mib = 64;
    spec.network = egress;
    ASSERT_TRUE(m_->PutTemplate(spec).ok());
    Result<TemplateInfo> t = Status::Unavailable("not yet");
    ASSERT_TRUE(Eventually([&] {
      t = m_->GetTemplate("tg");
      return t.ok() && t->state != TemplateState::kBaking;
    }));
    ASSERT_EQ(t->state, TemplateState::kReady) << t->message;
  }
  Result<SandboxInfo> Create(const std::string& id, EgressPolicy policy = {},
                             std::optional<int64_t> ttl = std::nullopt) {
    SandboxSpec s;
    s.id = id;
    s.template_name = "tg";
    s.network = policy;
    s.ttl_seconds = ttl;
    return m_->CreateSandbox(s);
  }
  std::optional<vmm::control::NetAttachment> VmNet(const SandboxInfo& info) {
    auto vm = launcher_->Vm(info.vmm_pid);
    return vm ? vm->net : std::nullopt;
  }
  std::string NetnsDir() const { return state_dir_ + "/netns"; }
  // No slot held by a sandbox; the pool's own may remain.
  bool NoSlotsInUse() {
    auto c = m_->usage().network;
    return c.in_use == 0 && c.releasing == 0 && net_->namespaces().size() == c.pooled;
  }

  std::string state_dir_, kernel_;
  std::shared_ptr<FakeVmmLauncher> launcher_ = std::make_shared<FakeVmmLauncher>();
  std::shared_ptr<FakeNetSystem> net_ = std::make_shared<FakeNetSystem>();
  std::unique_ptr<SandboxManager> m_;
  std::atomic<int64_t> clock_offset_s_{0};
  size_t net_pool_ = 2;
  metrics::Registry* registry_ = nullptr;  // null: the manager's own
  // Registries the tests hand the manager: they outlive it (TearDown).
  std::vector<std::unique_ptr<metrics::Registry>> registries_;
  metrics::Registry& NewRegistry() { return *registries_.emplace_back(std::make_unique<metrics::Registry>()); }
};

// The value of the sample `series` (name and labels, as rendered) in a
// Prometheus exposition, or -1.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return -1;
}

TEST_F(SandboxManagerNetworkTest, BakeGivesTheTemplateANicAndTheGuestItsAddresses) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  EXPECT_TRUE(m_->GetTemplate("tg")->nic);
  std::optional<FakeVmmLauncher::VmInfo> bake;
  for (const auto& vm : launcher_->Vms())
    if (vm.mode == "run") bake = vm;
  ASSERT_TRUE(bake);
  ASSERT_TRUE(bake->net);
  EXPECT_EQ(bake->net->tap, "tap0");
  EXPECT_EQ(bake->net->netns.rfind(NetnsDir() + "/slot-", 0), 0u) << bake->net->netns;
  EXPECT_EQ(bake->cmdline, "console=ttyS0 kubicle.net=172.16.0.2/30,172.16.0.1 kubicle.dns=1.1.1.1,8.8.8.8");
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "the bake's slot is given back";
}

TEST_F(SandboxManagerNetworkTest, EachSandboxHasItsOwnNamespaceAndMac) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  const EgressPolicy none{EgressMode::kNone, {}};
  auto a = Create("a");
  auto b = Create("b", none);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  ASSERT_TRUE(a->network && b->network);
  EXPECT_NE(a->network->netns, b->network->netns);
  EXPECT_NE(a->network->slot, b->network->slot);
  EXPECT_NE(a->network->mac, b->network->mac);
  for (const SandboxInfo& s : {*a, *b}) {
    const std::string& mac = s.network->mac;
    ASSERT_EQ(mac.size(), 17u);
    const int first = std::stoi(mac.substr(0, 2), nullptr, 16);
    EXPECT_EQ(first & 3, 2) << "locally administered unicast: " << mac;
    EXPECT_NE(mac, network::kGatewayMac);
    EXPECT_TRUE(net_->namespaces().count(s.network->netns));
    // The VMM was told to open that namespace's tap0 with that MAC.
    EXPECT_EQ(VmNet(s), (vmm::control::NetAttachment{"tap0", mac, s.network->netns}));
  }
  EXPECT_EQ(a->network->policy, EgressPolicy{});
  EXPECT_EQ(b->network->policy, none);
  // Its egress chain is the policy's (whole table if built for it, the
  // chain alone if it came from the pool).
  const std::string update = network::RenderEgressUpdate(none, m_->sandbox_network()->ruleset_inputs());
  const std::string chain = update.substr(update.find("  chain egress {"));
  EXPECT_NE(net_->ruleset(b->network->netns).find(chain.substr(0, chain.find("  }\n") + 4)), std::string::npos)
      << net_->ruleset(b->network->netns);
  EXPECT_EQ(m_->usage().network.in_use, 2u);
  // The record carries it, for re-adoption.
  auto text = ReadFileToString(state_dir_ + "/sandboxes/b/record.json");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("\"netns\": \"" + b->network->netns + "\""), std::string::npos) << *text;
  EXPECT_NE(text->find("\"egress\": \"none\""), std::string::npos) << *text;
}

TEST_F(SandboxManagerNetworkTest, EveryEndGivesTheSlotBack) {
  net_pool_ = 0;  // every slot built by its create: an injected failure hits the create's own step
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  // delete
  auto d = Create("deleted");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(m_->DeleteSandbox("deleted").ok());
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "delete";
  EXPECT_FALSE(net_->namespaces().count(d->network->netns));
  // VMM crash: the sandbox stays Failed, its namespace goes
  auto c = Create("crashed");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(launcher_->Crash(c->vmm_pid));
  ASSERT_TRUE(Eventually([&] { return m_->GetSandbox("crashed")->state == SandboxState::kFailed; }));
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "crash";
  ASSERT_TRUE(m_->DeleteSandbox("crashed").ok());
  EXPECT_TRUE(NoSlotsInUse()) << "no second release";
  // TTL
  ASSERT_TRUE(Create("expiring", {}, 60).ok());
  clock_offset_s_ = 120;
  EXPECT_EQ(m_->SweepExpired(), std::vector<std::string>{"expiring"});
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "ttl";
  // failed create: the restore fails, and a policy nft will not load
  launcher_->InjectFault("restore", FakeVmmLauncher::Fault::kError);
  EXPECT_FALSE(Create("failed").ok());
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "failed restore";
  net_->FailNext("nft");
  EXPECT_FALSE(Create("bad-policy", {EgressMode::kNone, {}}).ok());
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "failed policy";
  EXPECT_FALSE(m_->GetSandbox("bad-policy").ok());
}

TEST_F(SandboxManagerNetworkTest, ForkChildrenGetTheirOwnSlots) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  const EgressPolicy none{EgressMode::kNone, {}};
  auto src = Create("src", none);
  ASSERT_TRUE(src.ok());
  ForkRequest r;
  r.source_id = "src";
  r.children = {{.id = "k1"}, {.id = "k2"}};
  r.children[1].network = EgressPolicy{};
  auto kids = m_->ForkSandbox(r);
  ASSERT_TRUE(kids.ok()) << kids.status().ToString();
  ASSERT_EQ(kids->size(), 2u);
  std::set<std::string> netns = {src->network->netns}, macs = {src->network->mac};
  for (const SandboxInfo& k : *kids) {
    ASSERT_TRUE(k.network);
    netns.insert(k.network->netns);
    macs.insert(k.network->mac);
    EXPECT_EQ(VmNet(k), (vmm::control::NetAttachment{"tap0", k.network->mac, k.network->netns}));
  }
  EXPECT_EQ(netns.size(), 3u);
  EXPECT_EQ(macs.size(), 3u);
  EXPECT_EQ((*kids)[0].network->policy, none) << "the source's";
  EXPECT_EQ((*kids)[1].network->policy, EgressPolicy{}) << "its own";
  ASSERT_TRUE(m_->DeleteSandboxes("").ok());
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); }));
}

TEST_F(SandboxManagerNetworkTest, ReadoptionKeepsTheSlotAndSweepsTheRest) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  auto a = Create("a");
  ASSERT_TRUE(a.ok());
  m_->Shutdown(false);
  m_.reset();
  // What a crash could leave: a namespace no record names.
  ASSERT_TRUE(net_->CreateNetns(NetnsDir() + "/slot-77").ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  auto back = m_->GetSandbox("a");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->state, SandboxState::kRunning);
  EXPECT_EQ(back->network, a->network);
  EXPECT_TRUE(net_->namespaces().count(a->network->netns));
  EXPECT_FALSE(net_->namespaces().count(NetnsDir() + "/slot-77"));
  EXPECT_EQ(m_->usage().network.in_use, 1u);
  auto b = Create("b");
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->network->slot, a->network->slot) << "the adopted slot is not handed out again";
  // A re-adopted sandbox whose namespace is gone is Failed, not running blind.
  m_->Shutdown(false);
  m_.reset();
  ASSERT_TRUE(net_->DeleteNetns(b->network->netns).ok());
  ASSERT_NO_FATAL_FAILURE(Open());
  EXPECT_EQ(m_->GetSandbox("b")->state, SandboxState::kFailed);
  EXPECT_NE(m_->GetSandbox("b")->message.find("network namespace"), std::string::npos)
      << m_->GetSandbox("b")->message;
}

// A template's spec.network is the egress of its sandboxes that name none
// and of every per-call run, which restores like a create: a namespace of
// its own, given back once the run's VM is torn down (kubicle-vmm and the
// fake refuse a NIC snapshot without an attachment).
TEST_F(SandboxManagerNetworkTest, TheTemplatesEgressGoesToItsSandboxesAndRuns) {
  const EgressPolicy none{EgressMode::kNone, {}};
  ASSERT_NO_FATAL_FAILURE(OpenAndBake(none));
  SandboxSpec plain;
  plain.id = "plain";
  plain.template_name = "tg";
  auto inherits = m_->CreateSandbox(plain);
  auto own = Create("own", EgressPolicy{});
  ASSERT_TRUE(inherits.ok() && own.ok()) << inherits.status().ToString() << own.status().ToString();
  EXPECT_EQ(inherits->network->policy, none);
  EXPECT_EQ(own->network->policy, EgressPolicy{}) << "its own wins";
  RunOptions o;
  o.template_name = "tg";
  o.exec.request.argv = {"echo", "ran"};
  o.exec.timeout = 10s;
  auto r = m_->Run(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::string(r->exec.stdout_data.begin(), r->exec.stdout_data.end()), "ran\n");
  std::optional<FakeVmmLauncher::VmInfo> run_vm;
  for (const auto& vm : launcher_->Vms())
    if (vm.id.rfind("run-", 0) == 0) run_vm = vm;
  ASSERT_TRUE(run_vm);
  ASSERT_TRUE(run_vm->net) << "restored with a network attachment";
  EXPECT_NE(run_vm->net->netns, inherits->network->netns);
  EXPECT_NE(run_vm->net->netns, own->network->netns);
  EXPECT_NE(run_vm->net->mac, inherits->network->mac);
  // The run's namespace was given the template's egress chain.
  const std::string update = network::RenderEgressUpdate(none, m_->sandbox_network()->ruleset_inputs());
  std::string chain = update.substr(update.find("  chain egress {"));
  chain = chain.substr(0, chain.find("  }\n") + 4);
  auto applied = net_->rulesets_applied(run_vm->net->netns);
  EXPECT_TRUE(std::any_of(applied.begin(), applied.end(),
                          [&](const std::string& r) { return r.find(chain) != std::string::npos; }))
      << applied.size() << " rulesets, none with the template's chain:\n" << chain;
  ASSERT_TRUE(m_->DeleteSandbox("plain").ok());
  ASSERT_TRUE(m_->DeleteSandbox("own").ok());
  EXPECT_TRUE(Eventually([&] { return NoSlotsInUse(); })) << "the run's slot is given back";
}

TEST_F(SandboxManagerNetworkTest, ATemplateWithANicNeedsTheNetwork) {
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  m_->Shutdown(true);
  m_.reset();
  ASSERT_NO_FATAL_FAILURE(Open(/*network=*/false));
  auto s = Create("a");
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("--sandbox-network"), std::string::npos);
}

TEST_F(SandboxManagerNetworkTest, NoNetworkMeansNoNicAnywhere) {
  ASSERT_NO_FATAL_FAILURE(Open(/*network=*/false));
  TemplateSpec spec;
  spec.name = "tg";
  spec.kernel = kernel_;
  spec.mem_mib = 64;
  ASSERT_TRUE(m_->PutTemplate(spec).ok());
  ASSERT_TRUE(Eventually([&] { return m_->GetTemplate("tg")->state == TemplateState::kReady; }));
  EXPECT_FALSE(m_->GetTemplate("tg")->nic);
  auto s = Create("a");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->network);
  EXPECT_FALSE(VmNet(*s));
  EXPECT_EQ(net_->calls(), 0u) << "the host's network is never touched";
}

}  // namespace
}  // namespace kubicle::noderuntime

namespace kubicle::noderuntime {
namespace {

TEST_F(SandboxManagerNetworkTest, AHostThatCannotSetItUpFailsTheStartNamingTheFlag) {
  net_->FailNext("preflight");  // no CAP_NET_ADMIN
  auto m = SandboxManager::Open(Config(), nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("CAP_NET_ADMIN"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("--sandbox-network=off"), std::string::npos) << m.status().ToString();
  // The first slot is built at start: a host refusing namespaces fails it.
  net_->FailNext("netns");
  m = SandboxManager::Open(Config(), nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("first sandbox network slot"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("--sandbox-network=off"), std::string::npos);
  EXPECT_TRUE(net_->namespaces().empty() && net_->host_links().empty()) << "nothing half-built is left";
  net_->SetRoutes("default via 192.0.2.1 dev eth0\n10.200.0.0/24 dev eth1 proto kernel scope link\n");
  m = SandboxManager::Open(Config(), nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("choose another --sandbox-network-cidr"), std::string::npos)
      << m.status().ToString();
  // Off out loud: the host is not asked anything.
  const size_t calls = net_->calls();
  EXPECT_TRUE(SandboxManager::Open(Config(/*network=*/false), nullptr).ok());
  EXPECT_EQ(net_->calls(), calls);
}

TEST_F(SandboxManagerNetworkTest, SlotMetricsCountAndParse) {
  metrics::Registry& first = NewRegistry();
  registry_ = &first;
  net_pool_ = 0;  // every slot is built where it is asked for: no refill races the failure below
  ASSERT_NO_FATAL_FAILURE(OpenAndBake());
  ASSERT_TRUE(Create("a").ok());
  ASSERT_TRUE(Create("b").ok());
  // The bake's slot goes back on the network's worker, whose DeleteNetns
  // would take the failure below: let it finish first.
  ASSERT_TRUE(Eventually([&] { return m_->usage().network.releasing == 0; }));
  net_->FailNext("netns");
  EXPECT_FALSE(Create("c").ok());
  ASSERT_TRUE(Eventually([&] { return m_->usage().network.releasing == 0; })) << "c's halves are gone";
  std::string text = first.Render();
  EXPECT_EQ(Sample(text, R"(kubicle_sandbox_network_slots{state="in_use"})"), 2) << text;
  EXPECT_EQ(Sample(text, R"(kubicle_sandbox_network_slots{state="pooled"})"), 0) << text;
  EXPECT_EQ(Sample(text, R"(kubicle_sandbox_network_slots{state="free"})"), 16384 - 2) << text;
  EXPECT_EQ(Sample(text, "kubicle_sandbox_network_slot_build_failures_total"), 1) << text;
  // Built: the start's first slot, the bake's, a's and b's.
  EXPECT_EQ(Sample(text, "kubicle_sandbox_network_slot_build_seconds_count"), 4) << text;
  EXPECT_EQ(m_->usage().network.built, 4u);

  // A restart finds a namespace no sandbox holds: swept and counted.
  m_->Shutdown(false);
  m_.reset();
  ASSERT_TRUE(net_->CreateNetns(NetnsDir() + "/slot-77").ok());
  metrics::Registry& second = NewRegistry();  // one manager per registry
  registry_ = &second;
  ASSERT_NO_FATAL_FAILURE(Open());
  text = second.Render();
  EXPECT_EQ(Sample(text, "kubicle_sandbox_network_orphans_swept_total"), 1) << text;
  EXPECT_EQ(Sample(text, R"(kubicle_sandbox_network_slots{state="in_use"})"), 2) << "a and b re-adopted";

  // The reference parser reads the whole exposition, histogram included.
  const std::string path = state_dir_ + "-metrics.txt";
  std::ofstream(path) << first.Render();
  const std::string cmd = std::string("python3 ") + KUBICLE_CHECK_METRICS + " " + path +
                          " kubicle_sandbox_network_slot_build_seconds";
  const int rc = std::system(cmd.c_str());
  fs::remove(path);
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) GTEST_SKIP() << "prometheus_client not installed";
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << cmd;
}

TEST_F(SandboxManagerNetworkTest, WithTheNetworkOffTheSlotGaugesAreZero) {
  metrics::Registry& reg = NewRegistry();
  registry_ = &reg;
  ASSERT_NO_FATAL_FAILURE(Open(/*network=*/false));
  const std::string text = reg.Render();
  for (const char* state : {"in_use", "pooled", "building", "releasing", "free"})
    EXPECT_EQ(Sample(text, std::string(R"(kubicle_sandbox_network_slots{state=")") + state + "\"}"), 0)
        << state << "\n" << text;
}

}  // namespace
}  // namespace kubicle::noderuntime
