// kubicle-agent IDENTITY, POST_RESTORE and the test extras, as a host process.
#include <unistd.h>

#include <fstream>
#include <thread>

#include "guest/agent/agent_test_env.h"
#include "guest/protocol/tlv.h"

namespace kubicle::guest::agent::testing {
namespace {

using protocol::Tag;

bool HaveCapSysAdmin() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) == 0) {
      return (std::stoull(line.substr(7), nullptr, 16) >> 21) & 1;  // CAP_SYS_ADMIN
    }
  }
  return false;
}

TEST(AgentFlagsTest, ValueFlagsTakeBothForms) {
  auto p = AgentProcess::Start({"--log-level=error", "--log-level", "warn"});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE((*p)->Connect().ok());
  // A flag without a value takes no "=value": the agent refuses to start.
  EXPECT_FALSE(AgentProcess::Start({"--no-set-clock=yes"}).ok());
}

TEST_F(AgentTest, IdentityDescribesThisMachine) {
  auto id = client_->Identity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->name, "kubicle-agent");
  EXPECT_FALSE(id->software_version.empty());
  EXPECT_EQ(id->cpus, uint32_t(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GT(id->memory_bytes, 64ull << 20);
  EXPECT_GT(id->uptime_ns, 0u);
  EXPECT_EQ(id->generation, 0u);
  EXPECT_EQ(id->wall_clock_ns, 0u);
  char host[256] = {};
  ::gethostname(host, sizeof(host));
  EXPECT_EQ(id->hostname, host);
  // boot_id is the kernel's, as 16 bytes.
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string text;
  in >> text;
  std::string hex;
  for (uint8_t b : id->boot_id) {
    char buf[3];
    std::snprintf(buf, sizeof(buf), "%02x", b);
    hex += buf;
  }
  text.erase(std::remove(text.begin(), text.end(), '-'), text.end());
  EXPECT_EQ(hex, text);
  // A fresh CRNG sample each time.
  auto again = client_->Identity();
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->entropy_digest, id->entropy_digest);
}

// An agent without --nic (every host-process agent) never touches a NIC: a
// new MAC is reported as not applied, and a malformed one is refused.
TEST_F(AgentTest, PostRestoreMacNeedsANic) {
  protocol::PostRestoreRequest req;
  req.generation = 7;
  req.nic_mac = {0x02, 0, 0, 0, 0, 0x11};
  auto raw = client_->RawExchange(901, *protocol::EncodeFrame(protocol::MakeFrame(req, 901)));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_EQ(raw->type, protocol::MsgType::kPostRestore);
  protocol::FieldReader r(raw->payload);
  const std::string warnings = r.Str(Tag::kErrorMessage, 4096).value_or("");
  EXPECT_NE(warnings.find("nic mac: not set (no --nic)"), std::string::npos) << warnings;
  for (std::vector<uint8_t> bad : {std::vector<uint8_t>{1, 0, 0, 0, 0, 1},  // multicast
                                   std::vector<uint8_t>{2, 0, 0, 0, 0}}) {  // short
    req.nic_mac = bad;
    auto refused =
        client_->RawExchange(902, *protocol::EncodeFrame(protocol::MakeFrame(req, 902)));
    ASSERT_TRUE(refused.ok()) << refused.status().ToString();
    EXPECT_EQ(refused->type, protocol::MsgType::kError);
  }
}

TEST_F(AgentTest, PostRestoreAppliesGenerationClockHostnameAndSeed) {
  protocol::PostRestoreRequest req;
  req.generation = 42;
  req.hostname = "clone-42.sandbox";
  req.wall_clock_ns = 1700000000123456789ull;
  req.entropy_seed = RandomBytes(64, 77);
  auto raw = client_->RawExchange(
      900, *protocol::EncodeFrame(protocol::MakeFrame(req, 900)));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_EQ(raw->type, protocol::MsgType::kPostRestore);
  auto reply = protocol::PostRestoreReply::Decode(raw->payload);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->generation, 42u);
  // Steps that did not happen are reported in the reply.
  protocol::FieldReader r(raw->payload);
  const std::string warnings = r.Str(Tag::kErrorMessage, 4096).value_or("");
  EXPECT_NE(warnings.find("--no-set-clock"), std::string::npos) << warnings;
  if (HaveCapSysAdmin()) {
    EXPECT_EQ(warnings.find("RNDADDENTROPY"), std::string::npos) << warnings;
    EXPECT_EQ(warnings.find("RNDRESEEDCRNG"), std::string::npos) << warnings;
  } else {
    EXPECT_NE(warnings.find("RNDADDENTROPY"), std::string::npos) << warnings;
  }
  auto id = client_->Identity();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->generation, 42u);
  EXPECT_EQ(id->wall_clock_ns, req.wall_clock_ns);
  EXPECT_EQ(id->hostname, "clone-42.sandbox");
  // The host's own hostname was not touched (private UTS namespace or no-op).
  char host[256] = {};
  ::gethostname(host, sizeof(host));
  EXPECT_NE(std::string(host), "clone-42.sandbox");
  // Commands run by the agent see the new hostname when it was really set.
  if (agent_->private_uts()) {
    auto out = Shell("hostname");
    EXPECT_EQ(ToString(out.stdout_data), "clone-42.sandbox\n");
  }
}

TEST_F(AgentTest, MemFillAndChecksum) {
  ASSERT_TRUE(client_->MemFill(99, 1 << 20).ok());
  auto sum = client_->MemChecksum();
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(sum->size, 1u << 20);
  EXPECT_EQ(sum->seed, 99u);
  EXPECT_EQ(sum->checksum, protocol::ExpectedMemChecksum(99, 1 << 20));
  EXPECT_EQ(client_->MemFill(1, 1ull << 50).code(), StatusCode::kOutOfRange);
}

TEST_F(AgentTest, EntropyRead) {
  auto a = client_->ReadEntropy(64);
  auto b = client_->ReadEntropy(64);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

TEST_F(AgentTest, HelloAdvertisesTheAgent) {
  EXPECT_EQ(client_->agent().name, "kubicle-agent");
  EXPECT_TRUE(client_->agent().HasCapability("exec"));
  EXPECT_TRUE(client_->agent().HasCapability("files"));
  EXPECT_EQ(client_->agent().max_payload, protocol::kMaxPayload);
}

}  // namespace
}  // namespace kubicle::guest::agent::testing
