// Cgroups against fake roots (plain directories shaped like cgroup mounts).
#include "noderuntime/cgroups.h"

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

}  // namespace
}  // namespace kubicle::noderuntime
