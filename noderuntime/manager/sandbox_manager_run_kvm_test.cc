// kvm tests of per-call runs (SandboxManager::Run) on the test guest: output
// and exit codes, runs are never sandboxes, a Shutdown mid-run kills the
// VM, and 100 and 1,000 runs in a row leak nothing (KUBICLE_TEST_RUNS
// shortens the long one by hand).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <thread>

#include "noderuntime/node_util.h"
#include "noderuntime/manager/sandbox_manager_test_util.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using testing::ManagerTest;
namespace fs = std::filesystem;

std::string S(const guest::protocol::Bytes& b) { return std::string(b.begin(), b.end()); }

RunOptions RunOf(std::vector<std::string> argv) {
  RunOptions o;
  o.template_name = "tg";
  o.exec.request.argv = std::move(argv);
  o.exec.timeout = 10s;
  return o;
}

// Run VMs still on disk: their directories under <state>/sandboxes.
size_t RunDirs(const std::string& state_dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(state_dir + "/sandboxes", ec))
    n += e.path().filename().string().rfind("run-", 0) == 0;
  return n;
}

using SandboxManagerRunKvmTest = ManagerTest;

TEST_F(SandboxManagerRunKvmTest, RunReturnsOutputAndExitCodes) {
  OpenAndBake();
  auto echo = m_->Run(RunOf({"echo", "hello", "run"}));
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  EXPECT_EQ(S(echo->exec.stdout_data), "hello run\n");
  EXPECT_EQ(echo->exec.exit_code, 0);
  EXPECT_GT(echo->timings.restore_ms, 0);
  EXPECT_GE(echo->timings.total_ms, echo->timings.restore_ms + echo->timings.exec_ms - 0.01);
  auto f = m_->Run(RunOf({"false"}));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->exec.exit_code, 1);
  // Each run is a fresh VM with its own name.
  auto h1 = m_->Run(RunOf({"hostname"})), h2 = m_->Run(RunOf({"hostname"}));
  ASSERT_TRUE(h1.ok() && h2.ok());
  EXPECT_EQ(S(h1->exec.stdout_data).rfind("run-", 0), 0u) << S(h1->exec.stdout_data);
  EXPECT_NE(S(h1->exec.stdout_data), S(h2->exec.stdout_data));
  EXPECT_EQ(m_->Run([] { auto o = RunOf({"true"}); o.template_name = "nope"; return o; }()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(m_->Run(RunOf({})).status().code(), StatusCode::kInvalidArgument);
  const std::string metrics = metrics_->Render();
  EXPECT_NE(metrics.find("kubicle_runs_total{result=\"ok\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("kubicle_runs_in_flight 0"), std::string::npos);
}

TEST_F(SandboxManagerRunKvmTest, ARunIsNeverASandboxAndHasNoRecord) {
  OpenAndBake();
  RunOptions o = RunOf({"echo", "x"});
  std::promise<void> seen;
  std::promise<void> release;
  auto released = release.get_future().share();
  bool once = false;
  o.exec.io.on_output = [&](guest::protocol::OutputStream, guest::protocol::ByteSpan) {
    if (once) return;
    once = true;
    seen.set_value();
    released.wait();
  };
  auto fut = std::async(std::launch::async, [&] { return m_->Run(o); });
  seen.get_future().wait();
  // Mid-call: the VM runs, owned (the running orphan sweep spares it), but
  // is no sandbox and has no record a restart could re-adopt.
  EXPECT_EQ(RunDirs(state_dir_), 1u);
  for (auto& e : fs::directory_iterator(state_dir_ + "/sandboxes"))
    EXPECT_FALSE(fs::exists(e.path() / "record.json")) << e.path();
  EXPECT_EQ(m_->ListSandboxes("")->size(), 0u);
  // A pool VM still starting is young (unowned) too: let the pool refill first.
  for (int i = 0; i < 10000 && m_->usage().pool_vms != config_.pool_size_per_shape; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(m_->SweepOrphans(0s), 0u);
  EXPECT_NE(metrics_->Render().find("kubicle_runs_in_flight 1"), std::string::npos);
  release.set_value();
  ASSERT_TRUE(fut.get().ok());
  m_->DrainRunTeardowns();
  EXPECT_EQ(RunDirs(state_dir_), 0u);
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
}

TEST_F(SandboxManagerRunKvmTest, ShutdownMidRunKillsItsVm) {
  OpenAndBake();
  RunOptions o = RunOf({"echo", "x"});
  std::promise<void> seen;
  std::promise<void> release;
  auto released = release.get_future().share();
  bool once = false;
  o.exec.io.on_output = [&](guest::protocol::OutputStream, guest::protocol::ByteSpan) {
    if (once) return;
    once = true;
    seen.set_value();
    released.wait();
  };
  auto fut = std::async(std::launch::async, [&] { return m_->Run(o); });
  seen.get_future().wait();
  // Shutdown(false) keeps sandboxes running for the next Open, never a run.
  m_->Shutdown(false);
  release.set_value();
  (void)fut.get();  // finished or failed: either way its VM is gone
  EXPECT_EQ(RunDirs(state_dir_), 0u);
  ASSERT_TRUE(Reopen().ok());
  EXPECT_EQ(m_->ListSandboxes("")->size(), 0u);
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
  EXPECT_EQ(StateFiles(), 0u);
}

// A node with room for one VM and no pool: each run finds the previous
// run's VM still being torn down (off its caller's path) and waits for its
// capacity instead of failing "node is full".
TEST_F(SandboxManagerRunKvmTest, ABurstWaitsForCapacityHeldByTeardowns) {
  config_.capacity_mem_mib = 64;
  config_.capacity_vcpus = 1;
  config_.pool_size_per_shape = 0;
  OpenAndBake();
  for (int i = 0; i < 20; ++i) {
    auto r = m_->Run(RunOf({"echo", std::to_string(i)}));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(S(r->exec.stdout_data), std::to_string(i) + "\n");
  }
  m_->DrainRunTeardowns();
  EXPECT_EQ(m_->usage().mem_mib, 0u);
  // A sandbox that holds the VM for good is still refused, with the reason,
  // once nothing is being torn down.
  auto held = Create("held");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  auto refused = m_->Run(RunOf({"true"}));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted) << refused.status().ToString();
}

class SandboxManagerRunLeakKvmTest : public ManagerTest {
 protected:
  // `runs` runs of echo in a row, then everything a run holds is counted:
  // VMM processes, cgroups, state files, watches, fds and capacity.
  void RunsLeakNothing(int runs);
};

void SandboxManagerRunLeakKvmTest::RunsLeakNothing(int kRuns) {
  OpenAndBake();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(m_->Run(RunOf({"true"})).ok());  // first-use allocations
  m_->DrainRunTeardowns();
  auto pool_full = [&] {
    for (int i = 0; i < 5000 && m_->usage().pool_vms != config_.pool_size_per_shape; ++i)
      std::this_thread::sleep_for(1ms);
    return m_->usage().pool_vms == config_.pool_size_per_shape;
  };
  ASSERT_TRUE(pool_full());
  const size_t fds = OpenFds();  // each idle pool VM holds one pidfd
  const std::string fds_before = DescribeFds();
  std::vector<double> restore;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRuns; ++i) {
    const std::string v = std::to_string(i);
    auto r = m_->Run(RunOf({"echo", v}));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    ASSERT_EQ(S(r->exec.stdout_data), v + "\n");
    restore.push_back(r->timings.restore_ms);
  }
  m_->DrainRunTeardowns();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::sort(restore.begin(), restore.end());
  std::printf("%d runs: %.1f s, %.1f runs/s; restore p50 %.2f ms\n", kRuns, secs, kRuns / secs,
              restore[restore.size() / 2]);
  EXPECT_EQ(m_->ListSandboxes("")->size(), 0u);
  EXPECT_EQ(StateFiles(), 0u);
  ASSERT_TRUE(pool_full());
  EXPECT_TRUE(Quiesce(kPoolVms)) << DescribeVmmProcesses();
  EXPECT_EQ(m_->usage().mem_mib, 64u * m_->usage().pool_vms);  // the pool's reservations only
  EXPECT_EQ(m_->usage().watched_processes, 0u);
  EXPECT_EQ(OpenFds(), fds) << "before: " << fds_before << "\nafter: " << DescribeFds();
  EXPECT_NE(metrics_->Render().find("kubicle_runs_total{result=\"ok\"} " + std::to_string(kRuns + 5)),
            std::string::npos);
}

TEST_F(SandboxManagerRunLeakKvmTest, HundredRunsLeakNothing) { RunsLeakNothing(100); }

TEST_F(SandboxManagerRunLeakKvmTest, ThousandRunsLeakNothing) {
  const char* env = std::getenv("KUBICLE_TEST_RUNS");  // shorter runs by hand
  RunsLeakNothing(env ? std::atoi(env) : 1000);
}

}  // namespace
}  // namespace kubicle::noderuntime
