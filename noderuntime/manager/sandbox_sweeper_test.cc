// Sweeper on its own: a fake target (no SandboxManager), fake VMMs
// (FakeVmmLauncher), cgroups under a plain directory and an injected clock.
#include "noderuntime/manager/sandbox_sweeper.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>

#include "noderuntime/testing/eventually.h"
#include "noderuntime/testing/fake_vmm_launcher.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using testing::Eventually;
using testing::FakeVmmLauncher;
namespace fs = std::filesystem;

// Sandboxes as id -> expiry, and the VMM pids it owns.
class FakeTarget : public SweepTarget {
 public:
  std::vector<std::string> ExpiredSandboxes(WallTime now) override {
    std::lock_guard l(mu);
    std::vector<std::string> out;
    for (const auto& [id, expires] : expires_at)
      if (expires <= now) out.push_back(id);
    return out;
  }
  Status DeleteExpired(const std::string& id) override {
    std::lock_guard l(mu);
    if (id == refuse) return Status::Unavailable("cannot delete " + id);
    expires_at.erase(id);
    deleted.push_back(id);
    return Status::Ok();
  }
  std::set<pid_t> OwnedVmms() override {
    std::lock_guard l(mu);
    return owned;
  }

  std::mutex mu;
  std::map<std::string, WallTime> expires_at;
  std::vector<std::string> deleted;
  std::string refuse;
  std::set<pid_t> owned;
};

class SweeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-sweeper-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/state");
    for (const char* c : {"cpu", "memory", "pids"}) fs::create_directories(dir_ + "/cgroup/" + c);
    cgroups_ = std::make_unique<Cgroups>(dir_ + "/cgroup", true);  // a v1 root
    launcher_ = std::make_unique<FakeVmmLauncher>();
  }
  void TearDown() override {
    sweeper_.reset();
    launcher_.reset();
    fs::remove_all(dir_);
  }

  Sweeper::Options Options() {
    Sweeper::Options o;
    o.target = &target_;
    o.launcher = launcher_.get();
    o.cgroups = cgroups_.get();
    o.state_dir = dir_ + "/state";
    o.clock = [this] { return now_.load(); };
    o.ttl_interval = 3600s;  // by hand unless a test says otherwise
    o.orphan_interval = 0s;
    return o;
  }

  // A fake VMM of this node (its socket is under the state directory).
  pid_t StartVmm(const std::string& name) {
    auto vmm = launcher_->Spawn(vmm::LaunchSpec::Parse({"pool", "--mem", "64M", "--vcpus", "1", "--control",
                                                        dir_ + "/state/" + name + ".control", "--id", name})
                                    .value(),
                                dir_ + "/" + name + ".log");
    EXPECT_TRUE(vmm.ok()) << vmm.status().ToString();
    return vmm.ok() ? (*vmm)->pid() : -1;
  }
  bool Running(pid_t pid) {
    auto vm = launcher_->Vm(pid);
    return vm && vm->state != "exited";
  }
  // A group that cannot go yet: something is left inside it (a directory,
  // which Cgroups does not clear from a fake root as it does files).
  void MakeBusyGroup(const std::string& name) {
    ASSERT_TRUE(cgroups_->Create(name, {}).ok());
    fs::create_directories(GroupDir(name) + "/busy");
  }
  std::string GroupDir(const std::string& name) {
    return dir_ + "/cgroup/memory/kubicle/" + name;
  }

  std::string dir_;
  FakeTarget target_;
  std::unique_ptr<FakeVmmLauncher> launcher_;
  std::unique_ptr<Cgroups> cgroups_;
  std::atomic<WallTime> now_{WallTime(std::chrono::hours(1000))};
  std::unique_ptr<Sweeper> sweeper_;
};

TEST_F(SweeperTest, DeletesWhatExpiredByTheInjectedClock) {
  const WallTime t0 = now_.load();
  target_.expires_at = {{"a", t0 + 10s}, {"b", t0 + 20s}, {"c", t0 + 10s}};
  target_.refuse = "c";
  Sweeper s(Options());
  EXPECT_TRUE(s.SweepExpired().empty());
  now_ = t0 + 10s;
  EXPECT_EQ(s.SweepExpired(), std::vector<std::string>{"a"}) << "c's delete failed: not reported";
  now_ = t0 + 30s;
  EXPECT_EQ(s.SweepExpired(), std::vector<std::string>{"b"});
  EXPECT_EQ(target_.deleted, (std::vector<std::string>{"a", "b"}));
}

TEST_F(SweeperTest, KillsOnlyOldVmmsThatNoOneOwns) {
  const pid_t owned = StartVmm("owned");
  const pid_t orphan = StartVmm("orphan");
  auto other_node = launcher_->Spawn(
      vmm::LaunchSpec::Parse({"pool", "--control", dir_ + "/elsewhere.control"}).value(),
      dir_ + "/elsewhere.log");
  ASSERT_TRUE(other_node.ok());
  target_.owned = {owned};
  Sweeper s(Options());
  EXPECT_EQ(s.SweepOrphans(120s), 0u) << "young: may be mid-create";
  launcher_->AddAge(300);
  EXPECT_EQ(s.SweepOrphans(120s), 1u);
  EXPECT_TRUE(Eventually([&] { return !Running(orphan); }));
  EXPECT_TRUE(Running(owned));
  EXPECT_TRUE(Running((*other_node)->pid())) << "not under this node's state directory";
  EXPECT_EQ(s.SweepOrphans(120s), 0u);
}

TEST_F(SweeperTest, QueuesABusyCgroupUntilItIsEmpty) {
  Sweeper s(Options());
  ASSERT_TRUE(cgroups_->Create("free", {}).ok());
  s.RemoveCgroupSoon("free");
  EXPECT_FALSE(fs::exists(GroupDir("free")));
  EXPECT_EQ(s.pending_cgroups(), 0u);

  MakeBusyGroup("busy");
  s.RemoveCgroupSoon("busy");
  EXPECT_EQ(s.pending_cgroups(), 1u);
  s.RetryCgroupRemovals(1);
  EXPECT_EQ(s.pending_cgroups(), 1u) << "still busy: queued again";
  fs::remove(GroupDir("busy") + "/busy");
  s.RetryCgroupRemovals(1);
  EXPECT_EQ(s.pending_cgroups(), 0u);
  EXPECT_FALSE(fs::exists(GroupDir("busy")));

  MakeBusyGroup("reused");
  s.RemoveCgroupSoon("reused");
  s.ForgetCgroup("reused");  // a new VM of the same name owns it now
  EXPECT_EQ(s.pending_cgroups(), 0u);
  EXPECT_TRUE(fs::exists(GroupDir("reused")));
}

TEST_F(SweeperTest, TheThreadRetriesGroupsAndSweepsOnItsPeriods) {
  Sweeper::Options o = Options();
  o.ttl_interval = 10ms;
  o.orphan_interval = 1s;
  o.orphan_min_age = 0s;
  sweeper_ = std::make_unique<Sweeper>(o);
  const pid_t orphan = StartVmm("orphan");
  target_.expires_at = {{"gone", now_.load()}};
  MakeBusyGroup("busy");
  sweeper_->RemoveCgroupSoon("busy");
  sweeper_->Start();
  EXPECT_TRUE(Eventually([&] {
    std::lock_guard l(target_.mu);
    return target_.deleted == std::vector<std::string>{"gone"};
  }));
  fs::remove(GroupDir("busy") + "/busy");
  EXPECT_TRUE(Eventually([&] { return sweeper_->pending_cgroups() == 0; }));
  EXPECT_TRUE(Eventually([&] { return !Running(orphan); }));
  sweeper_->Stop();
  sweeper_->Stop();  // idempotent
  MakeBusyGroup("after");
  sweeper_->RemoveCgroupSoon("after");
  EXPECT_EQ(sweeper_->pending_cgroups(), 1u) << "queued for Shutdown's last retry";
}

}  // namespace
}  // namespace kubicle::noderuntime
