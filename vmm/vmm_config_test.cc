#include "vmm/vmm_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kubicle::vmm {
namespace {

class VmmConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    kernel_ = ::testing::TempDir() + "/kernel.bin";
    std::ofstream(kernel_) << "x";
  }
  std::string kernel_;
};

TEST_F(VmmConfigTest, ParsesFullCommandLine) {
  auto cfg = ParseRunArgs({"--kernel", kernel_, "--mem", "512M", "--vcpus", "2", "--disk",
                           kernel_ + ",ro", "--vsock-uds", "/tmp/v.sock", "--cid", "7",
                           "--control", "/tmp/c.sock", "--cmdline", "console=ttyS0"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->mem_bytes, 512ull << 20);
  EXPECT_EQ(cfg->vcpus, 2);
  ASSERT_EQ(cfg->disks.size(), 1u);
  EXPECT_TRUE(cfg->disks[0].read_only);
  EXPECT_EQ(cfg->guest_cid, 7u);
  EXPECT_EQ(cfg->cmdline, "console=ttyS0");
}

TEST_F(VmmConfigTest, ParsesNet) {
  auto cfg = ParseRunArgs({"--kernel", kernel_, "--net",
                           "tap=kbl0,mac=02:4B:42:00:00:01,rx-bps=10M,tx-pps=1000"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  ASSERT_TRUE(cfg->net.has_value());
  EXPECT_EQ(cfg->net->tap, "kbl0");
  EXPECT_EQ(cfg->net->mac, (std::array<uint8_t, 6>{0x02, 0x4b, 0x42, 0, 0, 1}));
  EXPECT_EQ(cfg->net->rx_bps, 10u << 20);
  EXPECT_EQ(cfg->net->tx_pps, 1000u);
  EXPECT_EQ(cfg->net->tx_bps, 0u);
  EXPECT_TRUE(cfg->net->limits_given);
  auto plain = ParseRunArgs({"--kernel", kernel_, "--net=tap=t,mac=02:00:00:00:00:09"});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->net->limits_given);
  EXPECT_FALSE(ParseRunArgs({"--kernel", kernel_}).value().net.has_value());
  // A restore takes the clone's TAP and MAC.
  auto restore = ParseRestoreArgs({"--snapshot", "/s", "--net", "tap=c1,mac=02:00:00:00:00:0a"});
  ASSERT_TRUE(restore.ok()) << restore.status().ToString();
  EXPECT_EQ(restore->net->tap, "c1");
  EXPECT_TRUE(restore->net->netns.empty());
  auto in_ns = ParseRestoreArgs(
      {"--snapshot", "/s", "--net", "tap=tap0,mac=02:00:00:00:00:0a,netns=/run/ns/a"});
  ASSERT_TRUE(in_ns.ok()) << in_ns.status().ToString();
  EXPECT_EQ(in_ns->net->netns, "/run/ns/a");
}

TEST_F(VmmConfigTest, RefusesBadNetFlags) {
  for (const char* bad : {
           "", "tap=t", "mac=02:00:00:00:00:01",            // both required
           "tap=t,mac=02:00:00:00:00",                       // short MAC
           "tap=t,mac=02:00:00:00:00:01,netns=rel/path",     // relative namespace
           "tap=a/b,mac=02:00:00:00:00:01",                  // not an interface name
           "tap=t,mac=02:00:00:00:00:0z",                    // not hex
           "tap=t,mac=01:00:5e:00:00:01",                    // multicast
           "tap=t,mac=00:00:00:00:00:00",                    // zero
           "tap=t,mac=02-00-00-00-00-01",                    // wrong separator
           "tap=t,mac=02:00:00:00:00:01,speed=1",            // unknown key
           "tap=t,mac=02:00:00:00:00:01,rx-bps=-1",          // negative
           "tap=t,mac=02:00:00:00:00:01,rx-bps=1Q",          // junk
           "tap=t,mac=02:00:00:00:00:01,tap=u",              // twice
           "tap=t,mac=02:00:00:00:00:01,",                   // empty item
           "tap=,mac=02:00:00:00:00:01",                     // empty name
           "tap=abcdefghijklmnop,mac=02:00:00:00:00:01",     // over IFNAMSIZ-1
           "tap=t,=x,mac=02:00:00:00:00:01", "tap"}) {
    auto cfg = ParseRunArgs({"--kernel", kernel_, "--net", bad});
    EXPECT_FALSE(cfg.ok()) << bad;
    EXPECT_NE(cfg.status().message().find("--net"), std::string::npos) << cfg.status().message();
  }
  EXPECT_FALSE(ParseRunArgs({"--kernel", kernel_, "--net", "tap=a,mac=02:00:00:00:00:01", "--net",
                             "tap=b,mac=02:00:00:00:00:02"})
                   .ok());
}

TEST_F(VmmConfigTest, TakesFlagEqualsValueAndKeepsACmdlineThatLooksLikeAFlag) {
  auto cfg = ParseRunArgs({"--kernel=" + kernel_, "--mem=512M", "--vcpus", "2", "--cid=7",
                           "--cmdline", "--init=/x console=ttyS0", "--no-rng"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->kernel_path, kernel_);
  EXPECT_EQ(cfg->mem_bytes, 512ull << 20);
  EXPECT_EQ(cfg->guest_cid, 7u);
  EXPECT_EQ(cfg->cmdline, "--init=/x console=ttyS0");
  EXPECT_FALSE(cfg->rng);
  auto eq = ParseRunArgs({"--kernel", kernel_, "--cmdline=a=b c"});
  ASSERT_TRUE(eq.ok()) << eq.status().ToString();
  EXPECT_EQ(eq->cmdline, "a=b c");
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--no-rng=yes"}).status().code(),
            StatusCode::kInvalidArgument);
  auto pool = ParsePoolArgs({"--mem=64M", "--control=/tmp/c.sock"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->control_path, "/tmp/c.sock");
  EXPECT_EQ(ParseRestoreArgs({"--snapshot=/s", "--mem=1G"}).status().code(),
            StatusCode::kInvalidArgument)
      << "restore refuses the shape in either form";
}

TEST_F(VmmConfigTest, ClearErrors) {
  auto missing = ParseRunArgs({"--kernel", "/nonexistent/vmlinux"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/vmlinux"), std::string::npos);

  auto tiny = ParseRunArgs({"--kernel", kernel_, "--mem", "1M"});
  EXPECT_EQ(tiny.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tiny.status().message().find("--mem"), std::string::npos);
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--mem", "2000G"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--vcpus", "0"}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--vcpus", "1000"}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--cid", "2"}).status().code(),
            StatusCode::kOutOfRange);
  // VMADDR_CID_ANY: the vsock device would refuse it later; the one CID rule
  // refuses it here.
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--cid", "4294967295"}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_TRUE(ParseRunArgs({"--kernel", kernel_, "--cid", "4294967294"}).ok());
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--disk", kernel_ + ",rx"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunArgs({"--kernel", kernel_, "--bogus", "1"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunArgs({"--kernel"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRunArgs({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ParseRestoreArgsTest, TakesSnapshotAndIdentityButNotTheMachineShape) {
  auto cfg = ParseRestoreArgs({"--snapshot", "/snaps/a", "--vsock-uds", "/run/v.sock", "--cid", "9",
                               "--control", "/run/c.sock", "--serial", "none"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->snapshot_path, "/snaps/a");
  EXPECT_EQ(cfg->guest_cid, 9u);
  EXPECT_EQ(cfg->vsock_uds, "/run/v.sock");
  EXPECT_EQ(cfg->control_path, "/run/c.sock");
  EXPECT_TRUE(cfg->kernel_path.empty());

  EXPECT_EQ(ParseRestoreArgs({"--cid", "9"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRestoreArgs({"--snapshot"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRestoreArgs({"--snapshot", "/s", "--cid", "1"}).status().code(),
            StatusCode::kOutOfRange);
  auto shaped = ParseRestoreArgs({"--snapshot", "/s", "--mem", "1G"});
  EXPECT_EQ(shaped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shaped.status().message().find("--mem"), std::string::npos);
  // --snapshot belongs to restore only.
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--snapshot", "/s"}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(LayerDirTest, RunRestoreAndPoolTakeAnExistingDirectory) {
  auto run = ParseRunArgs({"--kernel", "/proc/self/exe", "--layer-dir", "/tmp"});
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->layer_dir, "/tmp");
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--layer-dir", "/nonexistent/x"}).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--layer-dir", "/proc/self/exe"}).status().code(),
            StatusCode::kNotFound);
  auto restore = ParseRestoreArgs({"--snapshot", "/s", "--layer-dir", "/tmp"});
  ASSERT_TRUE(restore.ok()) << restore.status().ToString();
  EXPECT_EQ(restore->layer_dir, "/tmp");
  auto pool = ParsePoolArgs({"--mem", "64M", "--control", "/run/c", "--layer-dir", "/tmp"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->layer_dir, "/tmp");
  EXPECT_TRUE(ParseRunArgs({"--kernel", "/proc/self/exe"})->layer_dir.empty());
}

TEST(SerialLimitsTest, DefaultsAndFlags) {
  auto d = ParseRunArgs({"--kernel", "/proc/self/exe"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->serial_limits.max_file_bytes, 1u << 20);
  EXPECT_EQ(d->serial_limits.rotated_files, 1u);
  EXPECT_EQ(d->serial_limits.rate_bytes_per_sec, 64u << 10);
  auto pool = ParsePoolArgs({"--mem", "64M", "--control", "/run/c", "--serial-max-bytes", "4M",
                             "--serial-files", "3", "--serial-rate", "0", "--serial-burst", "1K"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->serial_limits.max_file_bytes, 4u << 20);
  EXPECT_EQ(pool->serial_limits.rotated_files, 3u);
  EXPECT_EQ(pool->serial_limits.rate_bytes_per_sec, 0u);
  EXPECT_EQ(pool->serial_limits.burst_bytes, 1024u);
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--serial-files", "17"}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--serial-burst", "0"}).status().code(),
            StatusCode::kOutOfRange);
  EXPECT_EQ(ParseRunArgs({"--kernel", "/proc/self/exe", "--serial-rate", "x"}).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubicle::vmm
