#include "vmm/launch_spec.h"

#include <gtest/gtest.h>

namespace kubicle::vmm {
namespace {

using Argv = std::vector<std::string>;

// Every field compared on its own, so a failure names the field a
// ToArgv/Parse pair lost.
void ExpectSameSpec(const LaunchSpec& a, const LaunchSpec& b) {
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.kernel_path, b.kernel_path);
  EXPECT_EQ(a.initrd_path, b.initrd_path);
  EXPECT_EQ(a.cmdline, b.cmdline);
  EXPECT_EQ(a.mem_bytes, b.mem_bytes);
  EXPECT_EQ(a.vcpus, b.vcpus);
  EXPECT_EQ(a.disks, b.disks);
  EXPECT_EQ(a.vsock_uds, b.vsock_uds);
  EXPECT_EQ(a.guest_cid, b.guest_cid);
  EXPECT_EQ(a.rng, b.rng);
  EXPECT_EQ(a.workspace_slot, b.workspace_slot);
  EXPECT_EQ(a.net.has_value(), b.net.has_value());
  if (a.net && b.net) {
    EXPECT_EQ(a.net->tap, b.net->tap);
    EXPECT_EQ(a.net->netns, b.net->netns);
    EXPECT_EQ(a.net->mac, b.net->mac);
    EXPECT_EQ(a.net->rx_bps, b.net->rx_bps);
    EXPECT_EQ(a.net->tx_bps, b.net->tx_bps);
    EXPECT_EQ(a.net->rx_pps, b.net->rx_pps);
    EXPECT_EQ(a.net->tx_pps, b.net->tx_pps);
    EXPECT_EQ(a.net->limits_given, b.net->limits_given);
  }
  EXPECT_EQ(a.serial_path, b.serial_path);
  EXPECT_EQ(a.serial_limits.max_file_bytes, b.serial_limits.max_file_bytes);
  EXPECT_EQ(a.serial_limits.rotated_files, b.serial_limits.rotated_files);
  EXPECT_EQ(a.serial_limits.rate_bytes_per_sec, b.serial_limits.rate_bytes_per_sec);
  EXPECT_EQ(a.serial_limits.burst_bytes, b.serial_limits.burst_bytes);
  EXPECT_EQ(a.control_path, b.control_path);
  EXPECT_EQ(a.vm_id, b.vm_id);
  EXPECT_EQ(a.snapshot_path, b.snapshot_path);
  EXPECT_EQ(a.layer_dir, b.layer_dir);
  EXPECT_EQ(a.seccomp, b.seccomp);
  EXPECT_EQ(a.log_json, b.log_json);
  EXPECT_EQ(a.log_level, b.log_level);
}

void ExpectRoundTrip(const LaunchSpec& spec) {
  ASSERT_TRUE(spec.Check().ok()) << spec.Check().ToString();
  const Argv argv = spec.ToArgv();
  auto back = LaunchSpec::Parse(argv);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameSpec(*back, spec);
  EXPECT_EQ(back->ToArgv(), argv);
}

// A run spec with every field away from its default.
LaunchSpec FullRun() {
  LaunchSpec s;
  s.mode = LaunchMode::kRun;
  s.kernel_path = "/k/vmlinux";
  s.initrd_path = "/k/initrd";
  s.cmdline = "--init=/x console=ttyS0 a=b,c";  // looks like a flag, has '=' and ','
  s.mem_bytes = 1536ull << 10;
  s.vcpus = 3;
  s.disks = {{"/d/root.img", true}, {"/d/with,comma.img", false}};
  s.vsock_uds = "/s/v.sock";
  s.guest_cid = 4294967294;
  s.rng = false;
  s.workspace_slot = true;
  s.net = NetFlags{.tap = "tap0", .netns = "/run/ns/a", .mac = {0x02, 0x4b, 0, 0, 0, 0xff},
                   .rx_bps = 10 << 20, .tx_bps = 0, .rx_pps = 1000, .tx_pps = 7,
                   .limits_given = true};
  s.serial_path = "/s/serial.log";
  s.serial_limits = {.max_file_bytes = 4097, .rotated_files = 16, .rate_bytes_per_sec = 0,
                     .burst_bytes = 1 << 10};
  s.control_path = "/s/c.ctl";
  s.vm_id = "bake-tg";
  s.layer_dir = "/t/layers";
  s.seccomp = SeccompMode::kLog;
  s.log_json = true;
  s.log_level = "debug";
  return s;
}

TEST(LaunchSpecTest, RunRoundTripsEveryField) { ExpectRoundTrip(FullRun()); }

TEST(LaunchSpecTest, DefaultsRoundTripInEveryMode) {
  LaunchSpec run;
  run.kernel_path = "/k";
  ExpectRoundTrip(run);
  LaunchSpec restore;
  restore.mode = LaunchMode::kRestore;
  restore.snapshot_path = "/snap";
  ExpectRoundTrip(restore);
  LaunchSpec pool;
  pool.mode = LaunchMode::kPool;
  pool.control_path = "/c";
  ExpectRoundTrip(pool);
}

TEST(LaunchSpecTest, RestoreAndPoolRoundTripWhatTheyTake) {
  LaunchSpec restore;
  restore.mode = LaunchMode::kRestore;
  restore.snapshot_path = "/snap";
  restore.vsock_uds = "/v";
  restore.guest_cid = 9;
  restore.net = NetFlags{.tap = "c1", .mac = {2, 0, 0, 0, 0, 0x0a}};  // limits kept from the snapshot
  restore.control_path = "/c";
  restore.serial_path = "none";
  restore.layer_dir = "/l";
  restore.vm_id = "";
  ExpectRoundTrip(restore);

  LaunchSpec pool;
  pool.mode = LaunchMode::kPool;
  pool.mem_bytes = 64 << 20;
  pool.vcpus = 2;
  pool.control_path = "/c";
  pool.vm_id = "pool-1";
  pool.serial_limits.rotated_files = 0;
  pool.seccomp = SeccompMode::kOff;
  ExpectRoundTrip(pool);
}

// What the node's VMMs are started with, flag for flag: a change here is a
// change of the node -> VMM contract (docs/vmm.md's usage).
TEST(LaunchSpecTest, GoldenArgv) {
  EXPECT_EQ(FullRun().ToArgv(),
            (Argv{"run", "--kernel", "/k/vmlinux", "--initrd", "/k/initrd",
                  "--cmdline", "--init=/x console=ttyS0 a=b,c", "--mem", "1536K", "--vcpus", "3",
                  "--disk", "/d/root.img,ro", "--disk", "/d/with,comma.img,rw", "--no-rng",
                  "--workspace-slot", "--layer-dir", "/t/layers", "--vsock-uds", "/s/v.sock",
                  "--cid", "4294967294", "--net",
                  "tap=tap0,mac=02:4b:00:00:00:ff,netns=/run/ns/a,rx-bps=10485760,tx-bps=0,"
                  "rx-pps=1000,tx-pps=7",
                  "--control", "/s/c.ctl", "--id", "bake-tg", "--serial", "/s/serial.log",
                  "--serial-max-bytes", "4097", "--serial-files", "16", "--serial-rate", "0",
                  "--serial-burst", "1K", "--seccomp", "log", "--log-level", "debug",
                  "--json-log"}));
  LaunchSpec pool;
  pool.mode = LaunchMode::kPool;
  pool.mem_bytes = 256 << 20;
  pool.control_path = "/state/sock/pool-7.ctl";
  pool.vm_id = "pool-7";
  EXPECT_EQ(pool.ToArgv(), (Argv{"pool", "--mem", "256M", "--vcpus", "1", "--control",
                                 "/state/sock/pool-7.ctl", "--id", "pool-7"}));
  LaunchSpec restore;
  restore.mode = LaunchMode::kRestore;
  restore.snapshot_path = "/snap";
  EXPECT_EQ(restore.ToArgv(), (Argv{"restore", "--snapshot", "/snap"}));
}

// A field the mode does not take is written and then refused, naming it.
TEST(LaunchSpecTest, AFieldTheModeDoesNotTakeIsRefusedNotLost) {
  LaunchSpec restore;
  restore.mode = LaunchMode::kRestore;
  restore.snapshot_path = "/snap";
  restore.mem_bytes = 1ull << 30;
  auto r = LaunchSpec::Parse(restore.ToArgv());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--mem"), std::string::npos) << r.status().message();
  LaunchSpec pool;
  pool.mode = LaunchMode::kPool;
  pool.control_path = "/c";
  pool.kernel_path = "/k";
  EXPECT_NE(LaunchSpec::Parse(pool.ToArgv()).status().message().find("--kernel"), std::string::npos);
  LaunchSpec run;
  run.kernel_path = "/k";
  run.snapshot_path = "/s";
  EXPECT_FALSE(run.Check().ok());
  EXPECT_NE(LaunchSpec::Parse(run.ToArgv()).status().message().find("--snapshot"), std::string::npos);
}

TEST(LaunchSpecTest, CheckHoldsABuiltSpecToTheParsersRules) {
  LaunchSpec s = FullRun();
  s.vcpus = 0;
  EXPECT_EQ(s.Check().code(), StatusCode::kOutOfRange);
  s = FullRun();
  s.guest_cid = 2;
  EXPECT_EQ(s.Check().code(), StatusCode::kOutOfRange);
  s = FullRun();
  s.net->netns = "/a,b";  // would split the --net value
  EXPECT_EQ(s.Check().code(), StatusCode::kInvalidArgument);
  s = FullRun();
  s.net->mac = {1, 0, 0, 0, 0, 1};  // multicast
  EXPECT_EQ(s.Check().code(), StatusCode::kInvalidArgument);
  s = FullRun();
  s.kernel_path.clear();
  EXPECT_EQ(s.Check().code(), StatusCode::kInvalidArgument);
  LaunchSpec pool;
  pool.mode = LaunchMode::kPool;
  EXPECT_NE(pool.Check().message().find("--control"), std::string::npos);
}

TEST(LaunchSpecTest, ParseNamesTheMode) {
  EXPECT_EQ(LaunchSpec::Parse({}).status().code(), StatusCode::kInvalidArgument);
  auto bad = LaunchSpec::Parse({"boot", "--kernel", "/k"});
  EXPECT_NE(bad.status().message().find("'boot'"), std::string::npos);
  auto pool = LaunchSpec::Parse({"pool", "--control=/c", "--mem", "64M"});
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_EQ(pool->mode, LaunchMode::kPool);
  EXPECT_EQ(pool->mem_bytes, 64u << 20);
}

TEST(ParseSizeTest, Suffixes) {
  EXPECT_EQ(*ParseSize("256M"), 256ull << 20);
  EXPECT_EQ(*ParseSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseSize("4k"), 4096u);
  EXPECT_EQ(*ParseSize("12345"), 12345u);
  EXPECT_FALSE(ParseSize("").ok());
  EXPECT_FALSE(ParseSize("-1M").ok());
  EXPECT_FALSE(ParseSize("12X").ok());
  EXPECT_FALSE(ParseSize("M").ok());
  EXPECT_EQ(ParseSize("99999999999999T").status().code(), StatusCode::kOutOfRange);
}

TEST(FormatSizeTest, LargestExactSuffixAndBack) {
  EXPECT_EQ(FormatSize(0), "0");
  EXPECT_EQ(FormatSize(4097), "4097");
  EXPECT_EQ(FormatSize(1536ull << 10), "1536K");
  EXPECT_EQ(FormatSize(64ull << 20), "64M");
  EXPECT_EQ(FormatSize(2ull << 30), "2G");
  EXPECT_EQ(FormatSize(3ull << 40), "3T");
  for (uint64_t v : {0ull, 1ull, 1023ull, 1024ull, 65537ull, 256ull << 20, ~0ull, ~0ull << 40})
    EXPECT_EQ(*ParseSize(FormatSize(v)), v) << v;
}

// A clone's attachment replaces TAP, namespace and MAC and keeps the limits.
TEST(NetFlagsForTest, TakesTheAttachmentAndKeepsTheLimits) {
  NetFlags parent;
  parent.tap = "old";
  parent.netns = "/ns/old";
  parent.rx_bps = 1000;
  parent.limits_given = true;
  auto n = NetFlagsFor({"tap0", "02:00:00:00:00:07", "/ns/new"}, parent);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(n->tap, "tap0");
  EXPECT_EQ(n->netns, "/ns/new");
  EXPECT_EQ(n->mac, (std::array<uint8_t, 6>{2, 0, 0, 0, 0, 7}));
  EXPECT_EQ(n->rx_bps, 1000u);
  EXPECT_FALSE(n->limits_given);
  EXPECT_FALSE(NetFlagsFor({"tap0", "01:00:00:00:00:07", ""}, parent).ok());
}

}  // namespace
}  // namespace kubicle::vmm
