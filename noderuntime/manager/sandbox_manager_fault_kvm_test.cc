// kvm fault tests of SandboxManager: a VMM killed under a sandbox, the
// daemon restarting with sandboxes running, orphans, delete during create,
// and 1,000 create/use/delete cycles that must leak nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "noderuntime/manager/sandbox_manager_test_util.h"
#include "noderuntime/node_util.h"
#include "noderuntime/testing/eventually.h"
#include "noderuntime/vmmhost/vmm_process.h"
#include "vmm/launch_spec.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using guest::protocol::Bytes;
using testing::ManagerTest;
using testing::SandboxesHoldMib;
namespace fs = std::filesystem;

Bytes B(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string S(const Bytes& b) { return std::string(b.begin(), b.end()); }

// A pool VMM under the state directory that no record owns, started as the
// node would start it but outside any launcher (an orphan of a crash).
Result<VmmHandle> SpawnStray(const std::string& state_dir) {
  vmm::LaunchSpec spec;
  spec.mode = vmm::LaunchMode::kPool;
  spec.mem_bytes = 64ull << 20;
  spec.control_path = state_dir + "/sock/stray.ctl";
  std::vector<std::string> argv = spec.ToArgv();
  argv.insert(argv.begin(), KUBICLE_VMM_BIN);
  return SpawnDetached(argv, state_dir + "/pool/stray.log");
}

using SandboxManagerFaultKvmTest = ManagerTest;

TEST_F(SandboxManagerFaultKvmTest, KilledVmmFailsTheSandboxAndFreesItsResources) {
  OpenAndBake();
  auto a = Create("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(SandboxesHoldMib(*m_, 64)) << m_->usage().mem_mib;
  ASSERT_EQ(::kill(a->vmm_pid, SIGKILL), 0);
  SandboxInfo info;
  for (int i = 0; i < 2000; ++i) {
    info = *m_->GetSandbox("a");
    if (info.state == SandboxState::kFailed) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(info.state, SandboxState::kFailed);
  EXPECT_NE(info.message.find("killed by signal 9"), std::string::npos) << info.message;
  EXPECT_TRUE(SandboxesHoldMib(*m_, 0)) << m_->usage().mem_mib;
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();  // cgroup gone too
  EXPECT_FALSE(fs::exists(state_dir_ + "/sock/" + std::to_string(a->cid) + ".ctl"));
  EXPECT_EQ(m_->ReadFile("a", "/x").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(metrics_->Render().find("kubicle_vmm_crashes_total 1"), std::string::npos);
  // The record stays (and survives a restart) until deleted.
  ASSERT_TRUE(Reopen().ok());
  EXPECT_EQ(m_->GetSandbox("a")->state, SandboxState::kFailed);
  ASSERT_TRUE(m_->DeleteSandbox("a").ok());
  EXPECT_EQ(StateFiles(), 0u);
}

TEST_F(SandboxManagerFaultKvmTest, DaemonRestartReadoptsTwentySandboxes) {
  OpenAndBake();
  std::map<std::string, SandboxInfo> made;
  for (int i = 0; i < 20; ++i) {
    auto sb = Create("s" + std::to_string(i), {{"kubicle.dev/run", "restart"}});
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    ASSERT_TRUE(m_->WriteFile(sb->id, "/data/who", B(sb->id), 0644).ok());
    made[sb->id] = *sb;
  }
  // One of them a fork child: a child of s0's VMM, not of this process.
  ForkRequest f;
  f.source_id = "s0";
  auto kid = m_->ForkSandbox(f);
  ASSERT_TRUE(kid.ok()) << kid.status().ToString();
  ASSERT_TRUE(m_->DeleteSandbox("s19").ok());
  made.erase("s19");
  made[(*kid)[0].id] = (*kid)[0];
  m_->Shutdown(false);
  m_.reset();
  EXPECT_TRUE(Quiesce(20, Cgroups())) << DescribeVmmProcesses();  // idle pool VMs are gone, sandboxes run on
  ASSERT_EQ(VmmProcesses(), 20u);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Reopen().ok());
  double adopt_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("re-adopting 20 sandboxes took %.1f ms\n", adopt_ms);
  auto all = m_->ListSandboxes("kubicle.dev/run=restart");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 20u);
  for (const SandboxInfo& i : *all) {
    EXPECT_EQ(i.state, SandboxState::kRunning) << i.id << ": " << i.message;
    EXPECT_EQ(i.vmm_pid, made[i.id].vmm_pid);
    EXPECT_TRUE(m_->CheckToken(i.id, made[i.id].token));
    auto who = m_->ReadFile(i.id, "/data/who");
    ASSERT_TRUE(who.ok()) << who.status().ToString();
    EXPECT_EQ(S(*who), i.fork_of.empty() ? i.id : i.fork_of);
  }
  // New sandboxes get fresh CIDs.
  auto n = Create("new");
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  for (auto& [id, info] : made) EXPECT_NE(info.cid, n->cid);
  ASSERT_EQ(m_->DeleteSandboxes("")->size(), 21u);
  EXPECT_EQ(StateFiles(), 0u);
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
}

TEST_F(SandboxManagerFaultKvmTest, RestartMarksVanishedVmsFailedAndKillsOrphans) {
  OpenAndBake();
  auto a = Create("a");
  auto b = Create("b");
  ASSERT_TRUE(a.ok() && b.ok());
  m_->Shutdown(false);
  m_.reset();
  ASSERT_EQ(::kill(a->vmm_pid, SIGKILL), 0);
  auto ha = AttachProcess(a->vmm_pid, std::nullopt);
  if (ha.ok()) {
    WaitExited(ha->pidfd.get(), 5s);
    ReapIfChild(ha->pidfd.get());
  }
  // An orphan: a VMM under our state dir that no record owns.
  auto orphan = SpawnStray(state_dir_);
  ASSERT_TRUE(orphan.ok());
  ASSERT_TRUE(WaitForControl(state_dir_ + "/sock/stray.ctl", orphan->pidfd.get(), 20s).ok());
  ASSERT_TRUE(Reopen().ok());
  EXPECT_TRUE(WaitExited(orphan->pidfd.get(), 0ms));  // Open killed (and reaped) it
  EXPECT_FALSE(fs::exists(state_dir_ + "/sock/stray.ctl"));
  auto ia = m_->GetSandbox("a");
  EXPECT_EQ(ia->state, SandboxState::kFailed);
  EXPECT_NE(ia->message.find("daemon was down"), std::string::npos) << ia->message;
  EXPECT_EQ(m_->GetSandbox("b")->state, SandboxState::kRunning);
  EXPECT_TRUE(m_->WriteFile("b", "/data/x", B("y"), 0644).ok());
}

TEST_F(SandboxManagerFaultKvmTest, RunningSweepKillsOnlyOrphans) {
  OpenAndBake();
  auto a = Create("a");
  ASSERT_TRUE(a.ok());
  ForkRequest f;
  f.source_id = "a";
  ASSERT_TRUE(m_->ForkSandbox(f).ok());
  auto orphan = SpawnStray(state_dir_);
  ASSERT_TRUE(orphan.ok());
  ASSERT_TRUE(WaitForControl(state_dir_ + "/sock/stray.ctl", orphan->pidfd.get(), 20s).ok());
  EXPECT_EQ(m_->SweepOrphans(3600s), 0u);  // too young to judge
  // A pool VM still starting is young too: let the pool fill first.
  for (int i = 0; i < 10000 && m_->usage().pool_vms != config_.pool_size_per_shape; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(m_->SweepOrphans(0s), 1u);
  EXPECT_TRUE(WaitExited(orphan->pidfd.get(), 10s));
  auto all = m_->ListSandboxes("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  for (const SandboxInfo& i : *all) {
    EXPECT_EQ(i.state, SandboxState::kRunning) << i.id;
    EXPECT_TRUE(m_->WriteFile(i.id, "/data/x", B("y"), 0644).ok());
  }
}

TEST_F(SandboxManagerFaultKvmTest, DeleteDuringCreate) {
  config_.pool_size_per_shape = 0;  // every create starts its VMM: a wider window
  OpenAndBake();
  for (int round = 0; round < 5; ++round) {
    std::string id = "race" + std::to_string(round);
    auto fut = std::async(std::launch::async, [&] { return Create(id); });
    Status del = Status::NotFound("");
    while (fut.wait_for(0ms) != std::future_status::ready) {
      del = m_->DeleteSandbox(id);
      if (del.ok()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100 * round));
    }
    auto created = fut.get();
    if (!del.ok()) del = m_->DeleteSandbox(id);  // the create won the race
    EXPECT_TRUE(del.ok()) << del.ToString();
    if (!created.ok()) {
      EXPECT_NE(created.status().message().find("deleted"), std::string::npos) << created.status().ToString();
    }
    EXPECT_EQ(m_->GetSandbox(id).status().code(), StatusCode::kNotFound);
  }
  EXPECT_TRUE(Quiesce(0)) << DescribeVmmProcesses();
  EXPECT_EQ(StateFiles(), 0u);
  EXPECT_EQ(m_->usage().mem_mib, 0u);
}

TEST_F(SandboxManagerFaultKvmTest, ThousandCyclesLeakNothing) {
  // Each cycle takes and gives back a network namespace too: without root
  // (or ip/nft) the test skips, saying so. KUBICLE_TEST_NO_NETWORK=1, set by
  // hand and never by the test command, runs it without the network.
  const std::string no_network = NetworkPrecondition();
  if (!no_network.empty() && no_network != "KUBICLE_TEST_NO_NETWORK=1") GTEST_SKIP() << no_network;
  if (no_network.empty()) {
    const Status net = EnableNetwork();
    ASSERT_TRUE(net.ok()) << net.ToString();
  } else {
    std::printf("without the sandbox network: %s\n", no_network.c_str());
  }
  OpenAndBake();
  // Warm up: the pool is full and the first-use allocations are made.
  for (int i = 0; i < 5; ++i) {
    auto sb = Create();
    ASSERT_TRUE(sb.ok());
    ASSERT_TRUE(m_->DeleteSandbox(sb->id).ok());
  }
  auto pool_full = [&] {
    for (int i = 0; i < 5000 && m_->usage().pool_vms != config_.pool_size_per_shape; ++i)
      std::this_thread::sleep_for(1ms);
    return m_->usage().pool_vms == config_.pool_size_per_shape;
  };
  // With the network on, only its pool is left between cycles: its
  // namespaces and their host veths, none building (a build holds fds).
  auto network_settled = [&] {
    if (!no_network.empty()) return true;
    for (int i = 0; i < 10000; ++i) {
      const auto c = m_->usage().network;
      if (c.in_use == 0 && c.releasing == 0 && c.building == 0 && c.pooled == config_.network.pool_size &&
          NetnsFiles() == c.pooled && HostVeths() == c.pooled)
        return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  };
  ASSERT_TRUE(pool_full());
  ASSERT_TRUE(network_settled());
  const size_t fds = OpenFds();  // each idle pool VM holds one pidfd
  const std::string fds_before = DescribeFds();
  const char* env = std::getenv("KUBICLE_TEST_CYCLES");  // shorter runs by hand
  const int kCycles = env ? std::atoi(env) : 1000;
  std::vector<double> ready;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kCycles; ++i) {
    auto sb = Create();
    ASSERT_TRUE(sb.ok()) << i << ": " << sb.status().ToString();
    ready.push_back(sb->ready_ms);
    std::string v = std::to_string(i);
    ASSERT_TRUE(m_->WriteFile(sb->id, "/data/i", B(v), 0644).ok());
    ASSERT_EQ(S(*m_->ReadFile(sb->id, "/data/i")), v);
    ASSERT_TRUE(m_->DeleteSandbox(sb->id).ok());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(ready.begin(), ready.end());
  std::printf("%d create/write/read/delete cycles: %.1f s, %.1f cycles/s; create-to-ready p50 %.2f ms p99 %.2f ms\n",
              kCycles, secs, kCycles / secs, ready[ready.size() / 2], ready[ready.size() * 99 / 100]);
  EXPECT_EQ(m_->ListSandboxes("")->size(), 0u);
  EXPECT_EQ(StateFiles(), 0u);
  ASSERT_TRUE(pool_full());
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
  EXPECT_EQ(m_->usage().mem_mib, 64u * m_->usage().pool_vms);  // the pool's reservations only
  EXPECT_EQ(m_->usage().watched_processes, 0u);
  EXPECT_TRUE(network_settled()) << "in use " << m_->usage().network.in_use << ", pooled "
                                 << m_->usage().network.pooled << ", netns files " << NetnsFiles()
                                 << ", host veths " << HostVeths();
  EXPECT_EQ(OpenFds(), fds) << "before: " << fds_before << "\nafter: " << DescribeFds();
  if (!no_network.empty()) return;
  // And one table on the host.
  EXPECT_EQ(HostNftTables(), 1u);
  EXPECT_GE(m_->usage().network.released, uint64_t(kCycles)) << "every cycle had a namespace of its own";
  m_->Shutdown(true);
  EXPECT_EQ(NetnsFiles(), 0u);
  EXPECT_EQ(HostVeths(), 0u);
  EXPECT_EQ(HostNftTables(), 0u) << "nothing left on the host";
}

}  // namespace
}  // namespace kubicle::noderuntime
