// SandboxNetwork over FakeNetSystem: the pool, builds, releases, census,
// re-adoption, the orphan sweep and the overlap check.
#include "noderuntime/network/sandbox_network.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>

#include "noderuntime/network/fake_net_system.h"
#include "noderuntime/network/host_share.h"
#include "noderuntime/testing/eventually.h"

namespace kubicle::noderuntime::network {
namespace {

using noderuntime::testing::Eventually;
using testing::FakeNetSystem;

class SandboxNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-netns-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    sys_.SetRoutes("default via 192.0.2.1 dev eth0\n192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2\n"
                   "local 192.0.2.2 dev eth0 table local proto kernel scope host src 192.0.2.2\n");
    sys_.SetAddresses("1: lo    inet 127.0.0.1/8 scope host lo\n"
                      "2: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SandboxNetwork::Options Opts(size_t pool, const char* cidr = "10.200.0.0/16") {
    return {.system = &sys_, .cidr = ParseCidr(cidr).value(), .netns_dir = dir_ + "/netns",
            .tag = "ab12", .pool_size = pool};
  }
  std::unique_ptr<SandboxNetwork> Started(size_t pool, const char* cidr = "10.200.0.0/16") {
    auto n = SandboxNetwork::Open(Opts(pool, cidr));
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_TRUE((*n)->Start().ok());
    return std::move(n).value();
  }
  bool Empty() const { return sys_.namespaces().empty() && sys_.host_links().empty(); }

  std::string dir_;
  FakeNetSystem sys_;
};

TEST_F(SandboxNetworkTest, OpenSetsUpTheHost) {
  auto n = Started(0);
  EXPECT_EQ(sys_.sysctl("", "net/ipv4/ip_forward"), "1");
  EXPECT_NE(sys_.ruleset("").find("table ip kubicle_ab12"), std::string::npos);
  EXPECT_NE(sys_.ruleset("").find("ip saddr 10.200.0.0/16 oifname != \"khab12-*\" masquerade"),
            std::string::npos);
  // The node's own address is on every sandbox's never-list; loopback is there anyway.
  ASSERT_EQ(n->ruleset_inputs().node_addresses.size(), 2u);
  EXPECT_EQ(n->ruleset_inputs().node_addresses[1].ToString(), "192.0.2.2");
  n->Stop(true);
  EXPECT_EQ(sys_.ruleset(""), RenderHostRulesetRemoval("kubicle_ab12")) << "nothing in use: the host table goes";
}

TEST_F(SandboxNetworkTest, RefusesACidrOverlappingAHostRoute) {
  sys_.SetRoutes("default via 192.0.2.1 dev eth0\n10.200.3.0/24 dev eth1 proto kernel scope link\n");
  auto n = SandboxNetwork::Open(Opts(0));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("10.200.3.0/24"), std::string::npos) << n.status().ToString();
  sys_.SetRoutes("local 10.200.0.9 dev eth1 table local proto kernel scope host src 10.200.0.9\n");
  EXPECT_FALSE(SandboxNetwork::Open(Opts(0)).ok()) << "an address of the host inside the CIDR";
  // Its own veths' routes (a restarted node) and unrelated ones are fine.
  sys_.SetRoutes("default via 192.0.2.1 dev eth0\n10.201.0.0/16 dev eth1\n"
                 "10.200.0.0/30 dev khab12-0 proto kernel scope link src 10.200.0.1\n"
                 "local 10.200.0.1 dev khab12-0 table local proto kernel scope host src 10.200.0.1\n");
  EXPECT_TRUE(SandboxNetwork::Open(Opts(0)).ok());
  // Another node's veths (another tag) are not its own.
  sys_.SetRoutes("10.200.0.0/30 dev khcd34-0 proto kernel scope link src 10.200.0.1\n");
  EXPECT_FALSE(SandboxNetwork::Open(Opts(0)).ok());
  EXPECT_FALSE(SandboxNetwork::Open(Opts(0, "10.0.0.0/29")).ok()) << "fewer than 4 slots";
  auto bad = Opts(0);
  bad.tag = "AB";
  EXPECT_FALSE(SandboxNetwork::Open(bad).ok());
  bad = Opts(0);
  bad.netns_dir = dir_ + "/with space";
  EXPECT_FALSE(SandboxNetwork::Open(bad).ok());
}

TEST_F(SandboxNetworkTest, BuildsASlotWhenThePoolIsEmpty) {
  auto n = Started(0);
  auto slot = n->Acquire({});
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  EXPECT_EQ(slot->index, 0u);
  EXPECT_EQ(slot->netns, dir_ + "/netns/slot-0");
  EXPECT_EQ(slot->host_veth, "khab12-0");
  EXPECT_EQ(slot->addresses.host.ToString(), "10.200.0.1");
  EXPECT_TRUE(sys_.namespaces().count(slot->netns));
  EXPECT_TRUE(sys_.host_links().count("khab12-0"));
  const auto host = sys_.batches("");
  ASSERT_FALSE(host.empty());
  EXPECT_EQ(host.back(), "link add khab12-0 type veth peer name veth0 netns " + slot->netns +
                             "\naddr add 10.200.0.1/30 dev khab12-0\nlink set khab12-0 up\n");
  ASSERT_EQ(sys_.batches(slot->netns).size(), 2u) << "Start's first slot was slot 0 too";
  EXPECT_EQ(sys_.batches(slot->netns)[1],
            "link set lo up\nlink set veth0 up\naddr add 10.200.0.2/30 dev veth0\n"
            "route add default via 10.200.0.1\ntuntap add tap0 mode tap\n"
            "link set tap0 address 02:6b:75:62:00:01\naddr add 172.16.0.1/30 dev tap0\nlink set tap0 up\n");
  EXPECT_EQ(sys_.sysctl(slot->netns, "net/ipv4/ip_forward"), "1");
  EXPECT_EQ(sys_.ruleset(slot->netns), RenderSandboxRuleset({}, n->ruleset_inputs()));
  auto second = n->Acquire({EgressMode::kNone, {}});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->index, 1u);
  EXPECT_EQ(sys_.ruleset(second->netns), RenderSandboxRuleset({EgressMode::kNone, {}}, n->ruleset_inputs()));
  EXPECT_EQ(n->census().in_use, 2u);
  EXPECT_EQ(n->census().built, 3u) << "Start's first slot (torn down again: no pool), then these two";
}

TEST_F(SandboxNetworkTest, PoolHandsOutBuiltSlotsAndRefills) {
  auto n = Started(2);
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 2; }));
  auto slot = n->Acquire({});
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 2; })) << "refilled";
  EXPECT_EQ(n->census().in_use, 1u);
  EXPECT_EQ(n->census().built, 3u);
  // A pooled slot with another policy gets it applied, and only it.
  const auto before = sys_.batches("").size();
  EgressPolicy allow{EgressMode::kAllow, {{ParseCidr("1.2.3.0/24").value(), {443}}}};
  auto other = n->Acquire(allow);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(sys_.ruleset(other->netns), RenderEgressUpdate(allow, n->ruleset_inputs()))
      << "only the egress chain is replaced";
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 2; }));
  EXPECT_EQ(sys_.batches("").size(), before + 1) << "one refill build, nothing for the take itself";
}

TEST_F(SandboxNetworkTest, ReleaseTearsDownOffTheCallersPath) {
  auto n = Started(0);
  auto a = n->Acquire({});
  auto b = n->Acquire({});
  ASSERT_TRUE(a.ok() && b.ok());
  n->Release(a->index);
  n->Release(a->index);  // twice is once
  // Start's first slot (no pool) was released too.
  ASSERT_TRUE(Eventually([&] { return n->census().released == 2 && n->census().releasing == 0; }));
  EXPECT_FALSE(sys_.namespaces().count(a->netns));
  EXPECT_FALSE(sys_.host_links().count(a->host_veth));
  EXPECT_FALSE(std::filesystem::exists(a->netns));
  EXPECT_TRUE(sys_.namespaces().count(b->netns));
  auto c = n->Acquire({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->index, a->index) << "the lowest free slot is reused";
  n->Release(b->index);
  n->Release(c->index);
  ASSERT_TRUE(Eventually([&] { return Empty(); }));
  const auto census = n->census();
  EXPECT_EQ(census.in_use + census.pooled + census.building + census.releasing, 0u);
}

TEST_F(SandboxNetworkTest, AFailedBuildLeavesNothing) {
  auto n = Started(0);
  for (const char* op : {"netns", "ip", "nft", "sysctl"}) {
    sys_.FailNext(op);
    auto slot = n->Acquire({});
    EXPECT_FALSE(slot.ok()) << op;
    ASSERT_TRUE(Eventually([&] { return Empty() && n->census().releasing == 0; })) << op;
  }
  EXPECT_EQ(n->census().in_use, 0u);
  EXPECT_TRUE(n->Acquire({}).ok()) << "the next build works";
}

TEST_F(SandboxNetworkTest, PolicyFailureOnAPooledSlotReleasesIt) {
  auto n = Started(1);
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 1; }));
  // Only the pooled slot's policy update fails, not the refill the
  // Acquire sets off on the worker at the same time.
  ASSERT_EQ(sys_.namespaces().size(), 1u);
  sys_.FailNextIn("nft", *sys_.namespaces().begin());
  EXPECT_FALSE(n->Acquire({EgressMode::kNone, {}}).ok());
  ASSERT_TRUE(Eventually([&] { return n->census().released == 1; }));
  EXPECT_EQ(n->census().in_use, 0u);
}

TEST_F(SandboxNetworkTest, RunsOutOfSlots) {
  auto n = Started(0, "10.200.0.0/28");
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(n->Acquire({}).ok());
  auto full = n->Acquire({});
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
}

TEST_F(SandboxNetworkTest, AdoptsHeldSlotsAndSweepsOrphans) {
  auto opts = Opts(0);
  std::filesystem::create_directories(opts.netns_dir);
  // What a node that died left: slot 3 a sandbox still runs in, slot 5 an
  // orphan, a host veth without its namespace, another node's veth.
  for (uint32_t i : {3u, 5u}) {
    ASSERT_TRUE(sys_.CreateNetns(opts.netns_dir + "/slot-" + std::to_string(i)).ok());
    ASSERT_TRUE(sys_.IpBatch("", "link add khab12-" + std::to_string(i) + " type veth peer name veth0\n").ok());
  }
  ASSERT_TRUE(sys_.IpBatch("", "link add khab12-9 type veth peer name veth0\n").ok());
  ASSERT_TRUE(sys_.IpBatch("", "link add khcd34-1 type veth peer name veth0\n").ok());
  auto n = SandboxNetwork::Open(opts);
  ASSERT_TRUE(n.ok());
  auto held = (*n)->Adopt(3);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->netns, opts.netns_dir + "/slot-3");
  EXPECT_EQ((*n)->Adopt(3).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ((*n)->Adopt(4).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*n)->Adopt(16384).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*n)->Start().ok());
  EXPECT_EQ(sys_.namespaces(), std::set<std::string>{opts.netns_dir + "/slot-3"});
  EXPECT_EQ(sys_.host_links(), (std::set<std::string>{"khab12-3", "khcd34-1"}));
  EXPECT_EQ((*n)->census().in_use, 1u);
  EXPECT_EQ((*n)->SweepOrphans(), 0u) << "nothing new";
  auto next = (*n)->Acquire({});
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->index, 0u);
  (*n)->Release(3);
  ASSERT_TRUE(Eventually([&] { return !sys_.namespaces().count(opts.netns_dir + "/slot-3"); }));
}

TEST_F(SandboxNetworkTest, StopTearsDownThePoolAndKeepsSlotsInUse) {
  auto n = Started(2);
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 2; }));
  auto held = n->Acquire({});
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(Eventually([&] { return n->census().pooled == 2; }));
  n->Stop(true);
  EXPECT_EQ(sys_.namespaces(), std::set<std::string>{held->netns});
  EXPECT_EQ(n->census().pooled, 0u);
  EXPECT_NE(sys_.ruleset("").find("table ip kubicle_ab12 {"), std::string::npos)
      << "a sandbox still runs: the host table stays";
  EXPECT_FALSE(n->Acquire({}).ok());
  n->Release(held->index);  // after Stop: torn down at once
  EXPECT_TRUE(Empty());
}

TEST_F(SandboxNetworkTest, StartBuildsAFirstSlotOrFails) {
  sys_.FailNext("preflight");
  auto refused = SandboxNetwork::Open(Opts(2));
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sys_.ruleset(""), "") << "a host that fails the preflight is not changed";
  for (const char* op : {"netns", "ip", "nft", "sysctl"}) {
    auto n = SandboxNetwork::Open(Opts(2));
    ASSERT_TRUE(n.ok());
    // Start's sweep lists links first (an `ip` it shrugs off): fail the build's too.
    sys_.FailNext(op, std::string(op) == "ip" ? 2 : 1);
    Status st = (*n)->Start();
    EXPECT_FALSE(st.ok()) << op;
    EXPECT_NE(st.message().find("first sandbox network slot"), std::string::npos) << st.ToString();
    EXPECT_TRUE(Empty()) << op << ": nothing half-built is left";
    EXPECT_EQ((*n)->census().build_failures, 1u);
    EXPECT_EQ((*n)->Acquire({}).status().code(), StatusCode::kUnavailable) << "not started";
  }
  // With a pool the first slot is its first; without, it is torn down again.
  auto pooled = Started(1);
  EXPECT_EQ(pooled->census().pooled, 1u) << "in the pool when Start returns";
  pooled.reset();
  auto bare = Started(0);
  EXPECT_TRUE(Empty());
  EXPECT_EQ(bare->census().built, 1u);
  EXPECT_EQ(bare->census().released, 1u);
}

TEST_F(SandboxNetworkTest, CensusAndEventsCountBuildsFailuresAndOrphans) {
  std::vector<double> built;
  int failed = 0;
  size_t swept = 0;
  std::mutex mu;
  auto opts = Opts(0, "10.200.0.0/28");
  opts.on_built = [&](double s) { std::lock_guard l(mu); built.push_back(s); };
  opts.on_build_failed = [&] { std::lock_guard l(mu); ++failed; };
  opts.on_orphans_swept = [&](size_t n) { std::lock_guard l(mu); swept += n; };
  std::filesystem::create_directories(opts.netns_dir);
  ASSERT_TRUE(sys_.CreateNetns(opts.netns_dir + "/slot-2").ok());  // a crash's leftover
  auto n = SandboxNetwork::Open(opts);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE((*n)->Start().ok());
  ASSERT_TRUE((*n)->Acquire({}).ok());
  sys_.FailNext("nft");
  EXPECT_FALSE((*n)->Acquire({}).ok());
  ASSERT_TRUE(Eventually([&] { return (*n)->census().releasing == 0; }));
  const auto c = (*n)->census();
  std::lock_guard l(mu);
  EXPECT_EQ(built.size(), 2u) << "the first slot and one Acquire";
  for (double s : built) EXPECT_GE(s, 0);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(swept, 1u);
  EXPECT_EQ(c.build_failures, 1u);
  EXPECT_EQ(c.orphans_swept, 1u);
  EXPECT_EQ(c.capacity, 4u);
  EXPECT_EQ(c.free, 3u) << "one in use";
}

// Two nodes on one host (e2e runs several): distinct state directories, so
// distinct netns directories and tags. Neither's sweep, at start or later,
// touches the other's namespaces, veths or host table, even after the
// other died without cleaning up.
TEST_F(SandboxNetworkTest, TwoNodesOnOneHostDoNotSweepEachOther) {
  SandboxNetwork::Options a_opts = Opts(1, "10.200.0.0/16");
  SandboxNetwork::Options b_opts = Opts(1, "10.201.0.0/16");
  b_opts.netns_dir = dir_ + "/other/netns";
  b_opts.tag = "cd34";
  auto a = SandboxNetwork::Open(a_opts);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE((*a)->Start().ok());
  auto a_slot = (*a)->Acquire({});
  ASSERT_TRUE(a_slot.ok());
  ASSERT_TRUE(Eventually([&] { return (*a)->census().pooled == 1; }));
  const std::set<std::string> a_namespaces = sys_.namespaces();
  const std::set<std::string> a_links = sys_.host_links();
  ASSERT_EQ(a_namespaces.size(), 2u) << "a's sandbox's and a's pool's";
  auto b = SandboxNetwork::Open(b_opts);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*b)->Start().ok());
  auto b_slot = (*b)->Acquire({});
  ASSERT_TRUE(b_slot.ok());
  EXPECT_EQ((*b)->SweepOrphans(), 0u);
  for (const std::string& ns : a_namespaces) EXPECT_TRUE(sys_.namespaces().count(ns)) << ns;
  for (const std::string& link : a_links) EXPECT_TRUE(sys_.host_links().count(link)) << link;
  EXPECT_EQ(b_slot->host_veth.rfind("khcd34-", 0), 0u);
  EXPECT_EQ(b_slot->netns.rfind(b_opts.netns_dir + "/", 0), 0u);
  EXPECT_EQ((*b)->host_table(), "kubicle_cd34");
  // a stops as a plain stop does (its sandbox's slot stays for the next
  // start); its restart sweeps its own leftover (nothing re-adopts it)
  // and nothing of b's.
  a->reset();
  auto a_again = SandboxNetwork::Open(a_opts);
  ASSERT_TRUE(a_again.ok());
  ASSERT_TRUE((*a_again)->Start().ok());
  EXPECT_EQ((*a_again)->census().orphans_swept, 1u) << "a's own orphan (slot 0, built again as its first)";
  EXPECT_TRUE(sys_.namespaces().count(b_slot->netns)) << "b's slot in use stays";
  EXPECT_TRUE(sys_.host_links().count(b_slot->host_veth));
  EXPECT_EQ((*a_again)->SweepOrphans(), 0u);
  EXPECT_TRUE(sys_.namespaces().count(b_slot->netns));
}

}  // namespace
}  // namespace kubicle::noderuntime::network

namespace kubicle::noderuntime::network {
namespace {

TEST(HostShare, LeasesAreDistinctAndSkipRoutedBlocks) {
  testing::FakeNetSystem sys;
  sys.SetRoutes("default via 192.0.2.1 dev eth0\n10.240.0.0/20 dev eth1 proto kernel scope link\n"
                "local 10.240.16.1 dev eth2 table local proto kernel scope host src 10.240.16.1\n");
  const Cidr all = ParseCidr("10.240.0.0/12").value();
  auto a = SandboxCidrLease::Take(sys);
  auto b = SandboxCidrLease::Take(sys);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  EXPECT_NE(a->cidr(), b->cidr()) << "held blocks are not handed out again";
  for (const std::string& c : {a->cidr(), b->cidr()}) {
    const Cidr cidr = ParseCidr(c).value();
    EXPECT_EQ(cidr.prefix, 20);
    EXPECT_TRUE(all.Contains(cidr.base)) << c;
    EXPECT_NE(c, "10.240.0.0/20") << "a routed block";
    EXPECT_NE(c, "10.240.16.0/20") << "a block holding a host address";
    EXPECT_TRUE(AddressPlan::For(cidr).ok()) << "a node takes it";
  }
}

TEST(HostShare, RemoveNodeNetworkTakesOnlyItsOwn) {
  char tmpl[] = "/tmp/kubicle-netns-test-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  testing::FakeNetSystem sys;
  std::filesystem::create_directories(dir + "/a/netns");
  std::filesystem::create_directories(dir + "/b/netns");
  for (const char* node : {"a", "b"}) {
    const std::string ns = dir + "/" + node + "/netns/slot-0";
    ASSERT_TRUE(sys.CreateNetns(ns).ok());
    const std::string tag = std::string(node) == "a" ? "ab12" : "cd34";
    ASSERT_TRUE(sys.IpBatch("", "link add kh" + tag + "-0 type veth peer name veth0 netns " + ns + "\n").ok());
  }
  ASSERT_TRUE(sys.Nft("", "table ip kubicle_ab12 {}\n").ok());
  RemoveNodeNetwork(sys, dir + "/a/netns", "ab12");
  EXPECT_EQ(sys.host_links(), std::set<std::string>{"khcd34-0"});
  EXPECT_EQ(sys.namespaces(), std::set<std::string>{dir + "/b/netns/slot-0"});
  EXPECT_EQ(sys.ruleset(""), RenderHostRulesetRemoval("kubicle_ab12"));
  EXPECT_EQ(SandboxNetworkTag("/var/lib/kubicle").size(), 4u);
  EXPECT_NE(SandboxNetworkTag("/tmp/kn-a/state"), SandboxNetworkTag("/tmp/kn-b/state"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubicle::noderuntime::network
