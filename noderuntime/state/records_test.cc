#include "noderuntime/state/records.h"

#include <gtest/gtest.h>

namespace kubicle::noderuntime {
namespace {

SandboxRecord Sample() {
  SandboxRecord r;
  r.info.id = "sb-1";
  r.info.template_name = "tg";
  r.info.labels = {{"kubicle.dev/run", "r1"}};
  r.info.state = SandboxState::kRunning;
  r.info.fork_of = "sb-0";
  r.info.created_at = WallTime(std::chrono::milliseconds(1764687600123));
  r.info.expires_at = WallTime(std::chrono::milliseconds(1764687660123));
  r.info.cid = 7;
  r.info.vmm_pid = 4242;
  r.info.ready_ms = 4.5;
  r.info.mem_mib = 64;
  r.info.vcpus = 1;
  r.token_sha256 = "ab";
  r.pid_start_time = 99;
  r.generation = 3;
  r.control_path = "/s/sock/7.ctl";
  r.vsock_path = "/s/sock/7.vsock";
  return r;
}

// The on-disk format: changing it breaks re-adoption of running VMs.
constexpr char kGolden[] = R"({
  "cid": 7,
  "control": "/s/sock/7.ctl",
  "created_at_ms": 1764687600123,
  "expires_at_ms": 1764687660123,
  "fork_of": "sb-0",
  "generation": 3,
  "id": "sb-1",
  "labels": {
    "kubicle.dev/run": "r1"
  },
  "mem_mib": 64,
  "message": "",
  "pid": 4242,
  "pid_start_time": 99,
  "ready_ms": 4.5,
  "state": "Running",
  "template": "tg",
  "token_sha256": "ab",
  "vcpus": 1,
  "version": 1,
  "vsock": "/s/sock/7.vsock"
}
)";

TEST(RecordsTest, SandboxRecordGoldenAndRoundTrip) {
  EXPECT_EQ(EncodeSandboxRecord(Sample()), kGolden);
  auto r = DecodeSandboxRecord(kGolden);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(EncodeSandboxRecord(*r), kGolden);
  EXPECT_EQ(r->info.labels.at("kubicle.dev/run"), "r1");
  EXPECT_EQ(r->info.expires_at, Sample().info.expires_at);
  SandboxRecord no_ttl = Sample();
  no_ttl.info.expires_at.reset();
  auto back = DecodeSandboxRecord(EncodeSandboxRecord(no_ttl));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->info.expires_at);
}

TEST(RecordsTest, SandboxEnvRoundTripsAndIsOptional) {
  SandboxRecord r = Sample();
  r.info.env = {{"GREETING", "hello world"}, {"EMPTY", ""}};
  auto back = DecodeSandboxRecord(EncodeSandboxRecord(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->info.env, r.info.env);
  // Records without "env" (the golden, older versions) decode with none.
  auto old = DecodeSandboxRecord(kGolden);
  ASSERT_TRUE(old.ok());
  EXPECT_TRUE(old->info.env.empty());
}

// A sandbox with its own namespace (docs/network.md): re-adoption finds the
// slot and the guest's MAC here.
constexpr char kGoldenNetwork[] = R"({
  "cid": 7,
  "control": "/s/sock/7.ctl",
  "created_at_ms": 1764687600123,
  "expires_at_ms": 1764687660123,
  "fork_of": "sb-0",
  "generation": 3,
  "id": "sb-1",
  "labels": {
    "kubicle.dev/run": "r1"
  },
  "mem_mib": 64,
  "message": "",
  "network": {
    "mac": "02:5a:00:00:00:07",
    "netns": "/s/netns/slot-12",
    "policy": {
      "egress": {
        "allow": [
          {
            "cidr": "1.2.3.0/24",
            "ports": [
              443
            ]
          }
        ]
      }
    },
    "slot": 12
  },
  "pid": 4242,
  "pid_start_time": 99,
  "ready_ms": 4.5,
  "state": "Running",
  "template": "tg",
  "token_sha256": "ab",
  "vcpus": 1,
  "version": 1,
  "vsock": "/s/sock/7.vsock"
}
)";

SandboxRecord SampleWithNetwork() {
  SandboxRecord r = Sample();
  r.info.network = SandboxNetworkInfo{
      "/s/netns/slot-12", 12, "02:5a:00:00:00:07",
      {network::EgressMode::kAllow, {{network::ParseCidr("1.2.3.0/24").value(), {443}}}}};
  return r;
}

TEST(RecordsTest, SandboxNetworkGoldenAndRoundTrip) {
  EXPECT_EQ(EncodeSandboxRecord(SampleWithNetwork()), kGoldenNetwork);
  auto r = DecodeSandboxRecord(kGoldenNetwork);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->info.network, SampleWithNetwork().info.network);
  EXPECT_EQ(EncodeSandboxRecord(*r), kGoldenNetwork);
  // Records without "network" (the golden, older versions) have none.
  EXPECT_FALSE(DecodeSandboxRecord(kGolden)->info.network);
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"slot\": 12", "\"slot\": -1"},
           {"\"slot\": 12", "\"slot\": \"12\""},
           {"\"netns\": \"/s/netns/slot-12\"", "\"netns\": \"slot-12\""},
           {"\"cidr\": \"1.2.3.0/24\"", "\"cidr\": \"1.2.3.4/24\""},
           {"\"mac\": \"02:5a:00:00:00:07\",", ""}}) {
    std::string s = kGoldenNetwork;
    s.replace(s.find(from), from.size(), to);
    auto bad = DecodeSandboxRecord(s);
    EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss) << to;
    EXPECT_NE(bad.status().message().find("network"), std::string::npos) << bad.status().ToString();
  }
}

// A suspended sandbox (docs/node.md, "Suspend and resume"): no VMM, its
// snapshot's size counted against the node's suspend disk budget.
constexpr char kGoldenSuspended[] = R"({
  "cid": 7,
  "control": "/s/sock/7.ctl",
  "created_at_ms": 1764687600123,
  "expires_at_ms": 1764687660123,
  "fork_of": "sb-0",
  "generation": 3,
  "id": "sb-1",
  "labels": {
    "kubicle.dev/run": "r1"
  },
  "mem_mib": 64,
  "message": "",
  "pid": 0,
  "pid_start_time": 0,
  "ready_ms": 4.5,
  "state": "Suspended",
  "suspended_at_ms": 1764687610000,
  "suspended_bytes": 8392704,
  "template": "tg",
  "token_sha256": "ab",
  "vcpus": 1,
  "version": 1,
  "vsock": "/s/sock/7.vsock"
}
)";

TEST(RecordsTest, SuspendedGoldenAndRoundTrip) {
  SandboxRecord r = Sample();
  r.info.state = SandboxState::kSuspended;
  r.info.vmm_pid = 0;
  r.pid_start_time = 0;
  r.info.suspended_at = WallTime(std::chrono::milliseconds(1764687610000));
  r.info.suspended_bytes = 8392704;
  EXPECT_EQ(EncodeSandboxRecord(r), kGoldenSuspended);
  auto back = DecodeSandboxRecord(kGoldenSuspended);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->info.state, SandboxState::kSuspended);
  EXPECT_EQ(back->info.suspended_at, r.info.suspended_at);
  EXPECT_EQ(back->info.suspended_bytes, 8392704u);
  EXPECT_EQ(EncodeSandboxRecord(*back), kGoldenSuspended);
  // A running record has neither field; a state and a time that disagree
  // are not a record this node wrote.
  EXPECT_FALSE(DecodeSandboxRecord(kGolden)->info.suspended_at);
  std::string no_time = kGoldenSuspended;
  no_time.erase(no_time.find("  \"suspended_at_ms\""), std::string("  \"suspended_at_ms\": 1764687610000,\n").size());
  EXPECT_EQ(DecodeSandboxRecord(no_time).status().code(), StatusCode::kDataLoss);
  std::string running = kGoldenSuspended;
  running.replace(running.find("Suspended"), 9, "Running");
  EXPECT_EQ(DecodeSandboxRecord(running).status().code(), StatusCode::kDataLoss);
  std::string bad = kGoldenSuspended;
  bad.replace(bad.find("8392704"), 7, "-1");
  EXPECT_EQ(DecodeSandboxRecord(bad).status().code(), StatusCode::kDataLoss);
}

TEST(RecordsTest, BadSandboxRecordsAreDataLoss) {
  for (const char* bad : {"", "[]", "{", R"({"version":2})", R"({"version":1})",
                          R"({"version":1,"id":5})"}) {
    EXPECT_EQ(DecodeSandboxRecord(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
  std::string s = kGolden;
  s.replace(s.find("Running"), 7, "Dancing");
  EXPECT_EQ(DecodeSandboxRecord(s).status().code(), StatusCode::kDataLoss);
  s = kGolden;
  s.replace(s.find("\"cid\": 7"), 8, "\"cid\": \"x\"");
  auto r = DecodeSandboxRecord(s);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("cid"), std::string::npos);
  // A float, a negative or an out-of-range number is refused, not cast
  // (5.5e31 -> uint64 is undefined; found by fuzz_records).
  for (const char* cid : {"5.5e31", "-7", "7.5", "4294967296"}) {
    s = kGolden;
    s.replace(s.find("\"cid\": 7"), 8, std::string("\"cid\": ") + cid);
    EXPECT_EQ(DecodeSandboxRecord(s).status().code(), StatusCode::kDataLoss) << cid;
  }
  s = kGolden;
  s.replace(s.find("\"version\": 1"), 12, "\"version\": 1e300");
  EXPECT_EQ(DecodeSandboxRecord(s).status().code(), StatusCode::kDataLoss);
}

TEST(RecordsTest, TemplateRecordRoundTrip) {
  TemplateRecord t;
  t.info.spec = {"tg", "/k", "", "console=ttyS0", {"/d,ro"}, 64, 2, {"echo hi"}};
  t.info.state = TemplateState::kReady;
  t.info.digest = "sha256:00";
  t.info.snapshot_dir = "/s/templates/tg/snapshot";
  t.info.nic = true;
  t.info.spec.network = {network::EgressMode::kNone, {}};
  t.info.bake_seconds = 1.5;
  t.info.ready_at = WallTime(std::chrono::milliseconds(5));
  auto back = DecodeTemplateRecord(EncodeTemplateRecord(t));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeTemplateRecord(*back), EncodeTemplateRecord(t));
  EXPECT_EQ(back->info.spec.disks, t.info.spec.disks);
  EXPECT_EQ(back->info.spec.warmup, t.info.spec.warmup);
  EXPECT_EQ(back->info.state, TemplateState::kReady);
  EXPECT_TRUE(back->info.nic);
  EXPECT_EQ(back->info.spec.network, t.info.spec.network);
  t.info.nic = false;
  std::string old = EncodeTemplateRecord(t);
  old.erase(old.find("  \"nic\": false,\n"), 16);
  auto without = DecodeTemplateRecord(old);  // an older record: no NIC
  ASSERT_TRUE(without.ok()) << without.status().ToString() << old;
  EXPECT_FALSE(without->info.nic);
  // Records from before templates had a policy: the default (internet).
  auto j = nlohmann::json::parse(old);
  j.erase("network");
  auto no_policy = DecodeTemplateRecord(j.dump());
  ASSERT_TRUE(no_policy.ok()) << no_policy.status().ToString();
  EXPECT_EQ(no_policy->info.spec.network, network::EgressPolicy{});
  j["network"] = {{"egress", "sometimes"}};
  EXPECT_EQ(DecodeTemplateRecord(j.dump()).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeTemplateRecord(R"({"version":1,"name":"x"})").status().code(), StatusCode::kDataLoss);
}

constexpr char kGoldenWorkspace[] = R"({
  "created_at_ms": 1700000000000,
  "filesystem": "ext4",
  "labels": {
    "team": "a"
  },
  "message": "",
  "name": "ws-1",
  "size_mib": 64,
  "state": "Ready",
  "token_sha256": "0000000000000000000000000000000000000000000000000000000000000001",
  "version": 1
}
)";

TEST(RecordsTest, WorkspaceRecordGoldenRoundTripAndBadFields) {
  WorkspaceRecord w;
  w.info.name = "ws-1";
  w.info.size_mib = 64;
  w.info.labels = {{"team", "a"}};
  w.info.created_at = WallTime(std::chrono::milliseconds(1700000000000));
  w.token_sha256 = std::string(63, '0') + "1";
  EXPECT_EQ(EncodeWorkspaceRecord(w), kGoldenWorkspace);
  auto back = DecodeWorkspaceRecord(kGoldenWorkspace);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(EncodeWorkspaceRecord(*back), kGoldenWorkspace);
  EXPECT_EQ(back->info.size_mib, 64u);
  for (const char* bad : {R"({"version":1,"name":"x"})", "[]", "{",
                          R"({"version":2,"name":"ws","size_mib":64,"filesystem":"ext4","state":"Ready","token_sha256":"x","created_at_ms":0})"}) {
    EXPECT_EQ(DecodeWorkspaceRecord(bad).status().code(), StatusCode::kDataLoss) << bad;
  }
  std::string big = kGoldenWorkspace;
  big.replace(big.find("\"size_mib\": 64"), 14, "\"size_mib\": 1");
  EXPECT_EQ(DecodeWorkspaceRecord(big).status().code(), StatusCode::kDataLoss);
  std::string xfs = kGoldenWorkspace;
  xfs.replace(xfs.find("ext4"), 4, "xfs!");
  EXPECT_EQ(DecodeWorkspaceRecord(xfs).status().code(), StatusCode::kDataLoss);
  // A sandbox record carries its workspace only when it has one.
  SandboxRecord r;
  r.info.id = "sb-1";
  r.info.workspace = "ws-1";
  r.token_sha256 = "t";
  auto sb = DecodeSandboxRecord(EncodeSandboxRecord(r));
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_EQ(sb->info.workspace, "ws-1");
}

}  // namespace
}  // namespace kubicle::noderuntime
