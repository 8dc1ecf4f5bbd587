// SandboxNetwork over FakeNetSystem: the pool, builds, releases, census,
// re-adoption, the orphan sweep and the overlap check.
#include "noderuntime/network/sandbox_network.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "noderuntime/network/fake_net_system.h"
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
  ASSERT_EQ(sys_.batches(slot->netns).size(), 1u);
  EXPECT_EQ(sys_.batches(slot->netns)[0],
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
  EXPECT_EQ(n->census().built, 2u);
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
  ASSERT_TRUE(Eventually([&] { return n->census().released == 1 && n->census().releasing == 0; }));
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
  sys_.FailNext("nft");
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

}  // namespace
}  // namespace kubicle::noderuntime::network
