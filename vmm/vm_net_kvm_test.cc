// kvm tests of virtio-net end to end: kubicle-vmm processes running the test
// guest, each attached to tap0 in a network namespace of the test's own
// (TestNetns), pinged from inside that namespace. A reply means frames went
// both ways (the kernel's ARP request and the guest's reply, then the echo
// and its reply); the namespace's neighbour entry shows which MAC the guest
// answered with. Forks and restores each get their own namespace and MAC.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "noderuntime/network/guest_network.h"
#include "vmm/exit_code.h"
#include "vmm/testing/test_netns.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using testing::TestNetns;
using testing::VmProcess;
using testing::VmProcessOptions;
namespace fs = std::filesystem;

constexpr auto kPingTimeout = 20s;

class VmNetKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
    if (::access("/dev/net/tun", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/net/tun is absent";
    char tmpl[] = "/tmp/kubicle-net-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    std::error_code ec;
    for (auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  static void SkipWithoutPrivileges(const Status& why) {
    GTEST_SKIP() << "needs CAP_SYS_ADMIN and CAP_NET_ADMIN: " << why.ToString();
  }
  // A namespace, or nullptr after a skip (no privileges) or a failure.
  std::unique_ptr<TestNetns> Netns() {
    auto ns = TestNetns::Create();
    if (ns.status().code() == StatusCode::kPermissionDenied) {
      SkipWithoutPrivileges(ns.status());
      return nullptr;
    }
    EXPECT_TRUE(ns.ok()) << ns.status().ToString();
    return ns.ok() ? std::move(ns).value() : nullptr;
  }
  static VmProcessOptions Options() {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    return o;
  }
  // Boots the test guest on `ns`'s TAP with `mac`, its agent answering.
  std::unique_ptr<VmProcess> Boot(const TestNetns& ns, const std::string& mac) {
    VmProcessOptions o = Options();
    o.extra_args = {"--net", ns.NetFlag(mac)};
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    if (!vm.ok()) return nullptr;
    auto agent = (*vm)->ConnectAgent(60s);
    EXPECT_TRUE(agent.ok()) << agent.status().ToString() << (*vm)->VmmLog();
    return agent.ok() ? std::move(vm).value() : nullptr;
  }
  // The guest behind `ns` answers a ping, having answered ARP with `mac`.
  static void ExpectAnswers(const TestNetns& ns, const std::string& mac, const std::string& who) {
    Status ping = ns.Ping(kPingTimeout);
    EXPECT_TRUE(ping.ok()) << who << ": " << ping.ToString();
    auto seen = ns.NeighbourMac();
    ASSERT_TRUE(seen.ok()) << who << ": " << seen.status().ToString();
    EXPECT_EQ(*seen, mac) << who;
  }
  std::string dir_;
};

TEST_F(VmNetKvmTest, BootedGuestAnswersPingsInItsNamespace) {
  auto ns = Netns();
  if (!ns) return;
  const std::string mac = "02:6b:75:00:10:01";
  auto vm = Boot(*ns, mac);
  ASSERT_TRUE(vm);
  EXPECT_NE(vm->SerialOutput().find("kubicle-testguest: net mac " + mac + " ip " +
                                    noderuntime::network::kGuestAddress + "\n"),
            std::string::npos)
      << vm->SerialOutput();
  ExpectAnswers(*ns, mac, "booted guest");
  // Again on a warm neighbour entry: the guest keeps answering.
  EXPECT_TRUE(ns->Ping(kPingTimeout).ok());
  // The gateway answers too (a ping that cannot come back from the guest).
  EXPECT_TRUE(ns->Ping(kPingTimeout, noderuntime::network::kGatewayAddress).ok());
}

TEST_F(VmNetKvmTest, ForkChildrenOwnTheirNamespaceAndMacAndTheParentStillAnswers) {
  auto parent_ns = Netns();
  if (!parent_ns) return;
  auto ns0 = Netns(), ns1 = Netns();
  ASSERT_TRUE(ns0 && ns1);
  const std::string parent_mac = "02:6b:75:00:20:01";
  const std::string child_macs[] = {"02:6b:75:00:20:02", "02:6b:75:00:20:03"};
  auto parent = Boot(*parent_ns, parent_mac);
  ASSERT_TRUE(parent);
  ExpectAnswers(*parent_ns, parent_mac, "parent before the fork");

  control::ForkRequest fork;
  std::vector<std::string> dirs;
  const TestNetns* child_ns[] = {ns0.get(), ns1.get()};
  for (int i = 0; i < 2; ++i) {
    dirs.push_back(dir_ + "/child" + std::to_string(i));
    ASSERT_TRUE(fs::create_directory(dirs.back()));
    fork.children.push_back({.control = dirs.back() + "/control.sock",
                             .cid = 80u + i,
                             .vsock_uds = dirs.back() + "/vsock.sock",
                             .serial = dirs.back() + "/serial.log",
                             .net = child_ns[i]->Attachment(child_macs[i])});
  }
  auto r = parent->control().Fork(fork, 60s);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << parent->VmmLog();
  ASSERT_EQ(r->pids.size(), 2u);
  std::vector<std::unique_ptr<VmProcess>> children;
  for (int i = 0; i < 2; ++i)
    children.push_back(VmProcess::Attach(static_cast<pid_t>(r->pids[i]), dirs[i]));

  for (int i = 0; i < 2; ++i) {
    ExpectAnswers(*child_ns[i], child_macs[i], "child " + std::to_string(i));
    auto agent = children[i]->ConnectAgent(20s);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    EXPECT_EQ((*agent)->Identity()->cid, 80u + i);
  }
  ExpectAnswers(*parent_ns, parent_mac, "parent after the fork");
}

TEST_F(VmNetKvmTest, PoolRestoreIntoAnotherNamespaceAnswersWithItsNewMac) {
  auto origin_ns = Netns();
  if (!origin_ns) return;
  auto clone_ns = Netns();
  ASSERT_TRUE(clone_ns);
  const std::string origin_mac = "02:6b:75:00:30:01", clone_mac = "02:6b:75:00:30:02";
  auto origin = Boot(*origin_ns, origin_mac);
  ASSERT_TRUE(origin);
  ExpectAnswers(*origin_ns, origin_mac, "origin");
  auto snap = origin->control().Snapshot({dir_ + "/s", /*resume=*/false}, 30s);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString() << origin->VmmLog();

  VmProcessOptions o = Options();
  o.pool = true;
  o.cid = 90;
  auto pool = VmProcess::Start(o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ASSERT_TRUE((*pool)->WaitForControl(20s).ok()) << (*pool)->VmmLog();
  // A snapshot with a NIC needs an attachment: refused without, pool intact.
  auto bare = (*pool)->control().Restore({.snapshot = dir_ + "/s"}, 30s);
  EXPECT_FALSE(bare.ok());
  control::RestoreRequest restore{.snapshot = dir_ + "/s", .cid = 91,
                                  .net = clone_ns->Attachment(clone_mac)};
  auto r = (*pool)->control().Restore(restore, 30s);
  ASSERT_TRUE(r.ok()) << r.status().ToString() << (*pool)->VmmLog();
  ExpectAnswers(*clone_ns, clone_mac, "restored clone");
  auto agent = (*pool)->ConnectAgent(20s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  EXPECT_EQ((*agent)->Identity()->cid, 91u);
}

TEST_F(VmNetKvmTest, AMissingTapOrNamespaceIsASetupFailureThatSaysWhich) {
  auto ns = Netns();
  if (!ns) return;
  struct Case {
    std::string flag, says;
  } cases[] = {
      {"tap=nosuch0,mac=02:6b:75:00:40:01,netns=" + ns->path(), "nosuch0"},
      {"tap=tap0,mac=02:6b:75:00:40:01,netns=" + dir_ + "/no-such-netns", dir_ + "/no-such-netns"},
  };
  for (const Case& c : cases) {
    VmProcessOptions o = Options();
    o.extra_args = {"--net", c.flag};
    auto vm = VmProcess::Start(o);
    ASSERT_TRUE(vm.ok()) << vm.status().ToString();
    auto code = (*vm)->Wait(30s);
    ASSERT_TRUE(code.ok()) << code.status().ToString();
    EXPECT_EQ(*code, static_cast<int>(ExitCode::kSetupFailed)) << c.flag << (*vm)->VmmLog();
    EXPECT_NE((*vm)->VmmLog().find(c.says), std::string::npos) << (*vm)->VmmLog();
  }
}

TEST_F(VmNetKvmTest, ForkChildWithoutANetAttachmentIsRefusedAndTheParentRuns) {
  auto ns = Netns();
  if (!ns) return;
  const std::string mac = "02:6b:75:00:50:01";
  auto parent = Boot(*ns, mac);
  ASSERT_TRUE(parent);
  const std::string child = dir_ + "/child";
  ASSERT_TRUE(fs::create_directory(child));
  control::ForkRequest fork;
  fork.children.push_back({.control = child + "/control.sock",
                           .cid = 95,
                           .vsock_uds = child + "/vsock.sock"});
  auto r = parent->control().Fork(fork, 60s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs \"net\""), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(fs::exists(child + "/control.sock")) << "no child was started";
  auto status = parent->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, control::VmState::kRunning);
  ExpectAnswers(*ns, mac, "parent");
}

}  // namespace
}  // namespace kubicle::vmm
