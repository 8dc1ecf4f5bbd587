// kvm tests of the fork control command through real kubicle-vmm processes
// and the test guest: children answer at once with their own CID, parent and
// children keep running, memory writes stay private, and a child forks again.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <filesystem>
#include <string>

#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using testing::VmProcess;
using testing::VmProcessOptions;
namespace fs = std::filesystem;

constexpr uint64_t kFillBytes = 256 * 1024;

class VmForkKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
  }
  std::unique_ptr<VmProcess> Boot() {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    return vm.ok() ? std::move(vm).value() : nullptr;
  }
  // Forks `from` into children with CIDs first_cid.., each with its sockets
  // in a new scratch dir; returns them attached.
  std::vector<std::unique_ptr<VmProcess>> Fork(VmProcess& from, int n, uint64_t first_cid) {
    control::ForkRequest fork;
    std::vector<std::string> dirs;
    for (int i = 0; i < n; ++i) {
      char tmpl[] = "/tmp/kubicle-fork-XXXXXX";
      EXPECT_NE(::mkdtemp(tmpl), nullptr);
      dirs.push_back(tmpl);
      fork.children.push_back({.control = dirs.back() + "/control.sock",
                               .cid = first_cid + i,
                               .vsock_uds = dirs.back() + "/vsock.sock",
                               .serial = dirs.back() + "/serial.log"});
    }
    auto r = from.control().Fork(fork, 60s);
    std::vector<std::unique_ptr<VmProcess>> out;
    if (!r.ok() || r->pids.size() != static_cast<size_t>(n)) {
      ADD_FAILURE() << r.status().ToString() << from.VmmLog();
      for (auto& d : dirs) fs::remove_all(d);
      return out;
    }
    for (int i = 0; i < n; ++i) out.push_back(VmProcess::Attach(static_cast<pid_t>(r->pids[i]), dirs[i]));
    return out;
  }
  static uint64_t Checksum(VmProcess& vm) {
    auto agent = vm.ConnectAgent(10s);
    EXPECT_TRUE(agent.ok()) << agent.status().ToString() << vm.VmmLog();
    if (!agent.ok()) return 0;
    auto sum = (*agent)->MemChecksum();
    EXPECT_TRUE(sum.ok()) << sum.status().ToString();
    return sum.ok() ? sum->checksum : 0;
  }
  static void Fill(VmProcess& vm, uint64_t seed) {
    auto agent = vm.ConnectAgent(10s);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    ASSERT_TRUE((*agent)->MemFill(seed, kFillBytes).ok());
  }
};

TEST_F(VmForkKvmTest, ChildrenAndParentRunWithPrivateMemory) {
  auto parent = Boot();
  ASSERT_TRUE(parent);
  ASSERT_TRUE(parent->ConnectAgent(60s).ok());
  Fill(*parent, 42);
  uint64_t sum = Checksum(*parent);
  ASSERT_NE(sum, 0u);

  auto children = Fork(*parent, 2, 50);
  ASSERT_EQ(children.size(), 2u);
  for (size_t i = 0; i < children.size(); ++i) {
    auto agent = children[i]->ConnectAgent(10s);
    ASSERT_TRUE(agent.ok()) << agent.status().ToString();
    auto id = (*agent)->Identity();
    ASSERT_TRUE(id.ok());
    EXPECT_EQ(id->cid, 50 + i);
    EXPECT_EQ(Checksum(*children[i]), sum);
  }
  EXPECT_EQ(Checksum(*parent), sum);
  auto status = parent->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->state, control::VmState::kRunning);

  // A write in one is invisible to all others.
  Fill(*children[0], 7);
  EXPECT_NE(Checksum(*children[0]), sum);
  EXPECT_EQ(Checksum(*children[1]), sum);
  EXPECT_EQ(Checksum(*parent), sum);
  Fill(*parent, 8);
  EXPECT_EQ(Checksum(*children[1]), sum);
}

TEST_F(VmForkKvmTest, ForkOfAFork) {
  auto parent = Boot();
  ASSERT_TRUE(parent);
  ASSERT_TRUE(parent->ConnectAgent(60s).ok());
  Fill(*parent, 42);
  auto children = Fork(*parent, 1, 60);
  ASSERT_EQ(children.size(), 1u);
  Fill(*children[0], 9);
  uint64_t child_sum = Checksum(*children[0]);
  auto grandchildren = Fork(*children[0], 1, 61);
  ASSERT_EQ(grandchildren.size(), 1u);
  EXPECT_EQ(Checksum(*grandchildren[0]), child_sum);
  EXPECT_EQ(Checksum(*children[0]), child_sum);
  EXPECT_NE(Checksum(*parent), child_sum);
}

TEST_F(VmForkKvmTest, TwentyWayForkAllAnswerWithTheirOwnCid) {
  auto parent = Boot();
  ASSERT_TRUE(parent);
  ASSERT_TRUE(parent->ConnectAgent(60s).ok());
  Fill(*parent, 42);
  uint64_t sum = Checksum(*parent);
  auto children = Fork(*parent, 20, 100);
  ASSERT_EQ(children.size(), 20u);
  for (size_t i = 0; i < children.size(); ++i) {
    auto agent = children[i]->ConnectAgent(20s);
    ASSERT_TRUE(agent.ok()) << i << ": " << agent.status().ToString();
    EXPECT_EQ((*agent)->Identity()->cid, 100 + i);
    EXPECT_EQ((*agent)->MemChecksum()->checksum, sum);
  }
  EXPECT_EQ(Checksum(*parent), sum);
}

// Targets of a process's fds >= 3 ("socket:[123]", "anon_inode:kvm-vm", paths).
std::vector<std::string> FdTargets(pid_t pid) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    if (std::stoi(e.path().filename().string()) < 3) continue;
    auto target = fs::read_symlink(e.path(), ec);
    if (!ec) out.push_back(target.string());
  }
  return out;
}

bool Connects(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

TEST_F(VmForkKvmTest, ChildrenHoldNoneOfTheParentsFds) {
  auto parent = Boot();
  ASSERT_TRUE(parent);
  auto agent = parent->ConnectAgent(60s);  // a live host connection in the parent
  ASSERT_TRUE(agent.ok());
  auto children = Fork(*parent, 1, 70);
  ASSERT_EQ(children.size(), 1u);
  ASSERT_TRUE(children[0]->ConnectAgent(20s).ok());
  std::vector<std::string> mine = FdTargets(children[0]->pid());
  std::vector<std::string> theirs = FdTargets(parent->pid());
  ASSERT_FALSE(theirs.empty());
  int vms = 0;
  for (const std::string& t : mine) {
    vms += t == "anon_inode:kvm-vm";
    if (t.rfind("socket:", 0) == 0) {
      EXPECT_EQ(std::count(theirs.begin(), theirs.end(), t), 0) << t << " is shared with the parent";
    }
    EXPECT_EQ(t.find(parent->dir()), std::string::npos) << t;
  }
  EXPECT_EQ(vms, 1) << "the child holds the parent's KVM VM";
  // Once the parent is gone nothing answers on its sockets.
  const std::string control = parent->control_path(), vsock = parent->vsock_path();
  EXPECT_TRUE(Connects(control));
  parent->Kill();
  EXPECT_FALSE(Connects(control));
  EXPECT_FALSE(Connects(vsock));
  EXPECT_TRUE(children[0]->ConnectAgent(10s).ok());
}

TEST_F(VmForkKvmTest, BadForkRequestsAreRefused) {
  auto parent = Boot();
  ASSERT_TRUE(parent);
  ASSERT_TRUE(parent->ConnectAgent(60s).ok());
  for (const nlohmann::json& req :
       {nlohmann::json{{"cmd", "fork"}},
        nlohmann::json{{"cmd", "fork"}, {"children", {{{"control", "/tmp/x"}, {"cid", 2}}}}},
        nlohmann::json{{"cmd", "fork"}, {"count", 2}, {"children", {{{"control", "/tmp/x"}, {"cid", 9}}}}}}) {
    auto r = parent->Control(req);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)["ok"], false) << req.dump();
  }
  EXPECT_EQ(parent->control().GetStatus(10s)->state, control::VmState::kRunning);
}

}  // namespace
}  // namespace kubicle::vmm
