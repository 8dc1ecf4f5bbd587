// The parsers of vm_stats.h and ReadVmStats over fake cgroup and proc roots.
#include "noderuntime/vmmhost/vm_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kubicle::noderuntime {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A /proc/<pid>/stat line with utime and stime as given (clock ticks).
std::string StatLine(pid_t pid, const std::string& comm, uint64_t utime, uint64_t stime) {
  return std::to_string(pid) + " (" + comm + ") S 1 1 1 0 -1 4194560 100 0 0 0 " +
         std::to_string(utime) + " " + std::to_string(stime) + " 0 0 20 0 3 0 123 1000 10\n";
}

uint64_t Ns(uint64_t ticks) { return ticks * (1000000000ull / ::sysconf(_SC_CLK_TCK)); }

TEST(VmStats, ParsesProcStatWithAHostileCommandName) {
  EXPECT_EQ(ParseProcStatCpuTicks(StatLine(7, "kubicle-vmm", 30, 12)), 42u);
  // A name with ") " and spaces cannot shift the fields.
  EXPECT_EQ(ParseProcStatCpuTicks(StatLine(7, "a) b (c) d", 5, 6)), 11u);
  EXPECT_FALSE(ParseProcStatCpuTicks("7 (x) S 1 2"));
  EXPECT_FALSE(ParseProcStatCpuTicks("no parenthesis"));
}

TEST(VmStats, ParsesVmRssAndCpuStat) {
  EXPECT_EQ(ParseVmRssBytes("Name:\tkubicle-vmm\nVmRSS:\t    2048 kB\nThreads:\t3\n"), 2048u * 1024);
  EXPECT_FALSE(ParseVmRssBytes("Name:\tx\n"));
  EXPECT_FALSE(ParseVmRssBytes("VmRSS:\t12 MB\n"));
  EXPECT_EQ(ParseCpuStatUsageUsec("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"), 1500u);
  EXPECT_FALSE(ParseCpuStatUsageUsec("user_usec 1000\n"));
}

class VmStatsRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("vmstats-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(VmStatsRootTest, V1SumsTheGroupsProcessesAndReadsMemory) {
  Cgroups cg((root_ / "cg").string(), true, "kubicle");
  const fs::path cpu = root_ / "cg/cpu/kubicle/k-1", mem = root_ / "cg/memory/kubicle/k-1",
                 pids = root_ / "cg/pids/kubicle/k-1";
  Write(cpu / "cgroup.procs", "100\n101\n");
  Write(mem / "memory.usage_in_bytes", "73400320\n");
  Write(mem / "memory.limit_in_bytes", "134217728\n");
  Write(pids / "pids.current", "2\n");
  Write(root_ / "proc/100/stat", StatLine(100, "kubicle-vmm", 20, 5));
  Write(root_ / "proc/101/stat", StatLine(101, "kubicle-vmm", 3, 2));
  auto s = ReadVmStats(cg, "k-1", 100, (root_ / "proc").string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->source, "cgroup");
  EXPECT_EQ(s->cpu_usage_ns, Ns(30));
  EXPECT_EQ(s->memory_bytes, 73400320u);
  EXPECT_EQ(s->memory_limit_bytes, 134217728u);
  EXPECT_EQ(s->pids, 2u);
}

TEST_F(VmStatsRootTest, V2ReadsCpuStatAndMemoryCurrent) {
  Write(root_ / "cg/cgroup.controllers", "cpu memory pids\n");
  Cgroups cg((root_ / "cg").string(), true, "kubicle");
  ASSERT_TRUE(cg.v2());
  const fs::path dir = root_ / "cg/kubicle/k-2";
  Write(dir / "cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
  Write(dir / "memory.current", "1048576\n");
  Write(dir / "memory.max", "max\n");
  Write(dir / "pids.current", "1\n");
  auto s = ReadVmStats(cg, "k-2", 1, (root_ / "proc").string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->cpu_usage_ns, 2500000u);
  EXPECT_EQ(s->memory_bytes, 1048576u);
  EXPECT_EQ(s->memory_limit_bytes, 0u);  // "max": no limit
}

TEST_F(VmStatsRootTest, WithoutCgroupsReadsTheVmmProcess) {
  Cgroups off((root_ / "cg").string(), false);
  Write(root_ / "proc/55/stat", StatLine(55, "kubicle-vmm", 7, 3));
  Write(root_ / "proc/55/status", "Name:\tkubicle-vmm\nVmRSS:\t4096 kB\n");
  auto s = ReadVmStats(off, "k-3", 55, (root_ / "proc").string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->source, "proc");
  EXPECT_EQ(s->cpu_usage_ns, Ns(10));
  EXPECT_EQ(s->memory_bytes, 4096u * 1024);
  // A VMM that is gone is Unavailable, not zeros.
  EXPECT_EQ(ReadVmStats(off, "k-3", 56, (root_ / "proc").string()).status().code(),
            StatusCode::kUnavailable);
}

TEST_F(VmStatsRootTest, MissingGroupIsUnavailable) {
  Cgroups cg((root_ / "cg").string(), true, "kubicle");
  EXPECT_EQ(ReadVmStats(cg, "nope", 1, (root_ / "proc").string()).status().code(),
            StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kubicle::noderuntime
