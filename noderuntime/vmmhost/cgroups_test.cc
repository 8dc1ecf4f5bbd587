// Cgroups against fake roots (plain directories shaped like cgroup mounts).
#include "noderuntime/vmmhost/cgroups.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "noderuntime/node_util.h"

namespace kubicle::noderuntime {
namespace {

namespace fs = std::filesystem;

class CgroupsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kubicle-cgroups-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Read(const std::string& rel) { return *ReadFileToString(root_ + "/" + rel); }
  std::string root_;
};

TEST_F(CgroupsTest, V1GroupsPerController) {
  for (const char* c : {"cpu", "memory", "pids"}) fs::create_directories(root_ + "/" + c);
  Cgroups cg(root_, true);
  EXPECT_FALSE(cg.v2());
  CgroupLimits l;
  l.mem_mib = 256;
  l.overhead_mib = 64;
  l.vcpus = 2;
  ASSERT_TRUE(cg.Create("sb-1", l).ok());
  EXPECT_EQ(Read("cpu/kubicle/sb-1/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read("cpu/kubicle/sb-1/cpu.cfs_quota_us"), "200000");
  EXPECT_EQ(Read("memory/kubicle/sb-1/memory.limit_in_bytes"), std::to_string(320ull << 20));
  EXPECT_EQ(Read("pids/kubicle/sb-1/pids.max"), "256");
  ASSERT_TRUE(cg.AddProcess("sb-1", 1234).ok());
  EXPECT_EQ(Read("memory/kubicle/sb-1/cgroup.procs"), "1234");
  EXPECT_EQ(cg.List(), std::vector<std::string>{"sb-1"});
  ASSERT_TRUE(cg.Remove("sb-1").ok());
  EXPECT_FALSE(fs::exists(root_ + "/cpu/kubicle/sb-1"));
  EXPECT_FALSE(fs::exists(root_ + "/memory/kubicle/sb-1"));
  EXPECT_TRUE(cg.List().empty());
  EXPECT_TRUE(cg.Remove("sb-1").ok());  // idempotent
}

TEST_F(CgroupsTest, RenameMovesTheGroupInEveryHierarchy) {
  for (const char* c : {"cpu", "memory", "pids"}) fs::create_directories(root_ + "/" + c);
  Cgroups cg(root_, true);
  ASSERT_TRUE(cg.Create("pool-1", {}).ok());
  ASSERT_TRUE(cg.Rename("pool-1", "sb-9").ok());
  EXPECT_EQ(cg.List(), std::vector<std::string>{"sb-9"});
  EXPECT_TRUE(fs::exists(root_ + "/pids/kubicle/sb-9/pids.max"));
  EXPECT_FALSE(fs::exists(root_ + "/memory/kubicle/pool-1"));
  EXPECT_FALSE(cg.Rename("pool-1", "x").ok());  // gone
}

TEST_F(CgroupsTest, V2UnifiedHierarchy) {
  std::ofstream(root_ + "/cgroup.controllers") << "cpu memory pids\n";
  Cgroups cg(root_, true, "kubicle-t");
  EXPECT_TRUE(cg.v2());
  CgroupLimits l;
  l.mem_mib = 64;
  l.overhead_mib = 32;
  l.vcpus = 3;
  ASSERT_TRUE(cg.Create("a", l).ok());
  EXPECT_EQ(Read("cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read("kubicle-t/cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read("kubicle-t/a/cpu.max"), "300000 100000");
  EXPECT_EQ(Read("kubicle-t/a/memory.max"), std::to_string(96ull << 20));
  ASSERT_TRUE(cg.AddProcess("a", 77).ok());
  EXPECT_EQ(Read("kubicle-t/a/cgroup.procs"), "77");
  ASSERT_TRUE(cg.Remove("a").ok());
  EXPECT_FALSE(fs::exists(root_ + "/kubicle-t/a"));
  ASSERT_TRUE(cg.RemoveParent().ok());
  EXPECT_FALSE(fs::exists(root_ + "/kubicle-t"));
}

TEST_F(CgroupsTest, DisabledDoesNothingAndMissingRootFails) {
  Cgroups off(root_, false);
  ASSERT_TRUE(off.Create("x", {}).ok());
  EXPECT_TRUE(fs::is_empty(root_));
  Cgroups missing(root_ + "/nope", true);
  EXPECT_FALSE(missing.Create("x", {}).ok());
}

// Debian's layout: cpu and cpuacct are symlinks to "cpu,cpuacct". The VMM
// must leave the node's group in every hierarchy, so it also joins the
// node's one group in each other hierarchy (no limits there; cgroup2's
// "unified" could not rename a per-VM group), and cpuset's is given its
// parent's CPUs and memory nodes, without which no task may join it.
TEST_F(CgroupsTest, V1VmmsJoinTheNodesGroupInEveryOtherHierarchy) {
  const std::vector<const char*> all = {"cpu,cpuacct", "memory", "pids", "devices", "freezer", "cpuset", "systemd"};
  for (const char* c : all) fs::create_directories(root_ + "/" + c);
  fs::create_directory_symlink("cpu,cpuacct", root_ + "/cpu");
  fs::create_directory_symlink("cpu,cpuacct", root_ + "/cpuacct");
  for (const char* c : all) std::ofstream(root_ + "/" + c + "/cgroup.procs") << "1\n";
  fs::create_directories(root_ + "/not-a-hierarchy");  // no cgroup.procs
  std::ofstream(root_ + "/cpuset/cpuset.cpus") << "0-1\n";
  std::ofstream(root_ + "/cpuset/cpuset.mems") << "0\n";
  fs::create_directories(root_ + "/cpuset/kubicle");
  std::ofstream(root_ + "/cpuset/kubicle/cpuset.cpus") << "\n";  // as a new cpuset group reads
  std::ofstream(root_ + "/cpuset/kubicle/cpuset.mems") << "";
  Cgroups cg(root_, true);
  EXPECT_EQ(cg.other_hierarchies(), (std::vector<std::string>{"cpuset", "devices", "freezer", "systemd"}));
  ASSERT_TRUE(cg.Create("sb-1", {}).ok());
  EXPECT_EQ(cg.Dirs("sb-1"), (std::vector<std::string>{root_ + "/cpu/kubicle/sb-1", root_ + "/memory/kubicle/sb-1",
                                                        root_ + "/pids/kubicle/sb-1"}));
  EXPECT_EQ(Read("cpuset/kubicle/cpuset.cpus"), "0-1");
  EXPECT_EQ(Read("cpuset/kubicle/cpuset.mems"), "0");
  EXPECT_FALSE(fs::exists(root_ + "/devices/kubicle/sb-1")) << "one group per node there, not per VM";
  ASSERT_TRUE(cg.AddProcess("sb-1", 4321).ok());
  for (const char* g : {"cpu/kubicle/sb-1", "memory/kubicle/sb-1", "pids/kubicle/sb-1", "cpuset/kubicle",
                        "devices/kubicle", "freezer/kubicle", "systemd/kubicle"})
    EXPECT_EQ(Read(std::string(g) + "/cgroup.procs"), "4321") << g;
  ASSERT_TRUE(cg.Rename("sb-1", "sb-2").ok());
  EXPECT_TRUE(fs::exists(root_ + "/pids/kubicle/sb-2"));
  ASSERT_TRUE(cg.Remove("sb-2").ok());
  ASSERT_TRUE(cg.RemoveParent().ok());
  for (const char* h : all) EXPECT_FALSE(fs::exists(root_ + "/" + h + "/kubicle")) << h;
}

// A container's /sys/fs/cgroup on v1 shows the container's own group as the
// root: /proc/self/cgroup names the group by its host path, which is not
// found under that root. The host's root has it, listing the process.
TEST_F(CgroupsTest, CheckOutsideOwnGroupTellsTheHostsRootFromAContainersView) {
  const std::string self = "9:name=systemd:/kubepods/pod1/c1\n8:pids:/kubepods/pod1/c1\n1:cpu:/kubepods/pod1/c1\n";
  for (const char* c : {"cpu", "memory", "pids"}) fs::create_directories(root_ + "/" + c);
  std::ofstream(root_ + "/pids/cgroup.procs") << "1\n77\n";  // the container's group, seen as root
  Cgroups view(root_, true);
  Status s = view.CheckOutsideOwnGroup(self, 77);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--cgroup-root"), std::string::npos) << s.ToString();

  fs::create_directories(root_ + "/pids/kubepods/pod1/c1");
  std::ofstream(root_ + "/pids/kubepods/pod1/c1/cgroup.procs") << "7\n77\n";
  EXPECT_TRUE(Cgroups(root_, true).CheckOutsideOwnGroup(self, 77).ok());
  EXPECT_FALSE(Cgroups(root_, true).CheckOutsideOwnGroup(self, 7777).ok()) << "another process";
  // A host process in the root group (a dev box run from a root shell).
  EXPECT_TRUE(Cgroups(root_, true).CheckOutsideOwnGroup("8:pids:/\n", 77).ok());
  EXPECT_FALSE(Cgroups(root_, false).CheckOutsideOwnGroup(self, 77).ok()) << "cgroups off";
}

}  // namespace
}  // namespace kubicle::noderuntime
