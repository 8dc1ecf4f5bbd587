// Process plumbing with ordinary binaries standing in for kubicle-vmm.
#include "noderuntime/vmmhost/vmm_process.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "noderuntime/node_util.h"
#include "noderuntime/vmmhost/process_watcher.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;

class VmmProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-vmmproc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(VmmProcessTest, SpawnDetachedLogsReapsAndLeaksNoFd) {
  int leaked = ::open("/dev/null", O_RDONLY);  // without O_CLOEXEC on purpose
  ASSERT_GE(leaked, 0);
  auto h = SpawnDetached({"/bin/sh", "-c", "echo out; echo err >&2; ls /proc/self/fd; exit 3"},
                         dir_ + "/log");
  ::close(leaked);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_GT(h->start_time, 0u);
  ASSERT_TRUE(WaitExited(h->pidfd.get(), 10s));
  EXPECT_EQ(ReapIfChild(h->pidfd.get()), 3);
  EXPECT_EQ(ReapIfChild(h->pidfd.get()), std::nullopt);  // once
  std::string log = *ReadFileToString(dir_ + "/log");
  EXPECT_NE(log.find("out\nerr\n"), std::string::npos);
  // ls sees 0, 1, 2 and its own directory fd (3): nothing of ours.
  EXPECT_EQ(log.substr(log.find("err\n") + 4), "0\n1\n2\n3\n");
}

// A VMM outlives the node: in a container the node's cwd lies in the root
// filesystem a rollout takes away, so the VMM's is its log's directory.
TEST_F(VmmProcessTest, SpawnDetachedRunsInTheLogsDirectory) {
  std::filesystem::create_directories(dir_ + "/sb");
  auto h = SpawnDetached({"/bin/sh", "-c", "pwd"}, dir_ + "/sb/vmm.log");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(WaitExited(h->pidfd.get(), 10s));
  EXPECT_EQ(ReapIfChild(h->pidfd.get()), 0);
  EXPECT_EQ(*ReadFileToString(dir_ + "/sb/vmm.log"), dir_ + "/sb\n");
}

TEST_F(VmmProcessTest, AttachChecksStartTimeAndKillThroughPidfd) {
  auto h = SpawnDetached({"/bin/sleep", "30"}, dir_ + "/log");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(AttachProcess(h->pid, h->start_time + 1).status().code(), StatusCode::kNotFound);
  auto again = AttachProcess(h->pid, h->start_time);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(WaitExited(again->pidfd.get(), 0ms));
  ASSERT_TRUE(PidfdKill(again->pidfd.get(), SIGKILL).ok());
  ASSERT_TRUE(WaitExited(h->pidfd.get(), 10s));
  auto code = ReapIfChild(h->pidfd.get());
  ASSERT_TRUE(code);
  EXPECT_EQ(DescribeExit(*code), "killed by signal 9 (SIGKILL)");
  EXPECT_TRUE(PidfdKill(again->pidfd.get(), SIGKILL).ok());  // already gone: fine
}

TEST_F(VmmProcessTest, WatcherReportsExitsOnce) {
  ProcessWatcher w;
  ASSERT_TRUE(w.Start().ok());
  auto a = SpawnDetached({"/bin/sh", "-c", "exit 5"}, dir_ + "/a");
  auto b = SpawnDetached({"/bin/sleep", "30"}, dir_ + "/b");
  ASSERT_TRUE(a.ok() && b.ok());
  std::mutex mu;
  std::condition_variable cv;
  std::optional<int> got;
  int calls = 0;
  ASSERT_TRUE(w.Watch(a->pidfd.get(), [&](std::optional<int> c) {
                 std::lock_guard l(mu);
                 got = c;
                 ++calls;
                 cv.notify_all();
               }).ok());
  auto kb = w.Watch(b->pidfd.get(), [&](std::optional<int>) { ADD_FAILURE() << "unwatched"; });
  ASSERT_TRUE(kb.ok());
  {
    std::unique_lock l(mu);
    ASSERT_TRUE(cv.wait_for(l, 10s, [&] { return calls == 1; }));
    EXPECT_EQ(got, 5);
  }
  w.Unwatch(*kb);
  EXPECT_EQ(w.size(), 0u);
  ASSERT_TRUE(PidfdKill(b->pidfd.get(), SIGKILL).ok());
  ASSERT_TRUE(WaitExited(b->pidfd.get(), 10s));
  EXPECT_TRUE(ReapIfChild(b->pidfd.get()));
}

TEST_F(VmmProcessTest, WaitForControlGivesUpWhenTheProcessExits) {
  // The control client's own errors are tested in vmm/control_client_test.cc.
  auto s = SpawnDetached({"/bin/true"}, dir_ + "/log");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(WaitExited(s->pidfd.get(), 10s));
  EXPECT_EQ(WaitForControl(dir_ + "/none.sock", s->pidfd.get(), 10s).code(), StatusCode::kUnavailable);
  ReapIfChild(s->pidfd.get());
}

TEST_F(VmmProcessTest, FindsProcessesByBinaryAndStateDir) {
  // tail stands in for kubicle-vmm; its argument lies under dir_. (Not a
  // shell: a shell's forked child shows the same command line until it execs.)
  ASSERT_TRUE(AtomicWriteFile(dir_ + "/watched", "x\n").ok());
  auto s = SpawnDetached({"/usr/bin/tail", "-f", dir_ + "/watched"}, dir_ + "/log");
  ASSERT_TRUE(s.ok());
  std::vector<pid_t> found;
  for (int i = 0; i < 5000 && found.empty(); ++i) {
    found = FindVmmProcesses("/usr/bin/tail", dir_);
    if (found.empty()) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(found, std::vector<pid_t>{s->pid});
  EXPECT_TRUE(FindVmmProcesses("/usr/bin/tail", dir_ + "-other").empty());
  EXPECT_TRUE(FindVmmProcesses("/usr/bin/kubicle-vmm", dir_).empty());
  (void)PidfdKill(s->pidfd.get(), SIGKILL);
  WaitExited(s->pidfd.get(), 10s);
  ReapIfChild(s->pidfd.get());
}

}  // namespace
}  // namespace kubicle::noderuntime
