// The test guest under the real kubicle-vmm on this machine's /dev/kvm:
// serial banner, identity, RAM files, clone hook, memory fill, several vsock
// connections at once and hostile frames, all through the AgentClient.
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "guest/protocol/tlv.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::guest::testguest {
namespace {

using namespace std::chrono_literals;
using client::AgentClient;
using protocol::Bytes;
using vmm::testing::VmProcess;
using vmm::testing::VmProcessOptions;

class TestGuestKvm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent";
  }
  std::unique_ptr<VmProcess> Boot(int vcpus = 1, uint64_t cid = 3, std::string mem = "128M") {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    o.vcpus = vcpus;
    o.cid = cid;
    o.mem = mem;
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    if (!vm.ok()) return nullptr;
    Status ready = (*vm)->WaitForSerial("kubicle-testguest: ready", 60s);
    EXPECT_TRUE(ready.ok()) << ready.ToString() << "\n" << (*vm)->SerialOutput();
    return ready.ok() ? std::move(vm).value() : nullptr;
  }
  static std::unique_ptr<AgentClient> Connect(VmProcess& vm) {
    auto c = vm.ConnectAgent(30s);
    EXPECT_TRUE(c.ok()) << c.status().ToString() << "\n" << vm.SerialOutput();
    return c.ok() ? std::move(c).value() : nullptr;
  }
};

TEST_F(TestGuestKvm, BannerAndIdentity) {
  auto vm = Boot(2, 7, "128M");
  ASSERT_TRUE(vm);
  const std::string serial = vm->SerialOutput();
  EXPECT_NE(serial.find("kubicle-testguest: up\n"), std::string::npos) << serial;
  EXPECT_NE(serial.find("kubicle-testguest: cpus 2\n"), std::string::npos) << serial;
  EXPECT_NE(serial.find("kubicle-testguest: vsock cid 7 port 1024\n"), std::string::npos) << serial;
  EXPECT_NE(serial.find(" id 4 rng\n"), std::string::npos) << serial;
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->agent().name, "kubicle-testguest");
  auto id = c->Identity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->cid, 7u);
  EXPECT_EQ(id->cpus, 2u);
  EXPECT_EQ(id->hostname, "kubicle-testguest");
  EXPECT_EQ(id->generation, 0u);
  EXPECT_GT(id->memory_bytes, 120ull << 20);
  EXPECT_LE(id->memory_bytes, 128ull << 20);
  ASSERT_EQ(id->boot_id.size(), 16u);
  EXPECT_NE(id->boot_id, Bytes(16, 0)) << "boot id should come from virtio-rng";
}

TEST_F(TestGuestKvm, TwoBootsHaveDifferentBootIds) {
  auto a = Boot();
  auto b = Boot(1, 4);
  ASSERT_TRUE(a && b);
  auto ca = Connect(*a);
  auto cb = Connect(*b);
  ASSERT_TRUE(ca && cb);
  EXPECT_NE(ca->Identity()->boot_id, cb->Identity()->boot_id);
}

TEST_F(TestGuestKvm, FilesAndPostRestore) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  Bytes data(64 * 1024);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + (i >> 9));
  ASSERT_TRUE(c->WriteFile("/work/data.bin", data).ok());
  auto back = c->ReadFile("/work/data.bin");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  auto list = c->List("/work");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "data.bin");
  ASSERT_TRUE(c->Remove("/work", true).ok());
  EXPECT_EQ(c->Stat("/work/data.bin").status().code(), StatusCode::kNotFound);

  const uint64_t digest = c->Identity()->entropy_digest;
  protocol::PostRestoreRequest pr;
  pr.entropy_seed = Bytes(32, 0x5a);
  pr.hostname = "sbx-clone-1";
  pr.generation = 3;
  pr.wall_clock_ns = 1'800'000'000'000'000'000ull;
  ASSERT_TRUE(c->PostRestore(pr).ok());
  auto id = c->Identity();
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->hostname, "sbx-clone-1");
  EXPECT_EQ(id->generation, 3u);
  EXPECT_EQ(id->wall_clock_ns, pr.wall_clock_ns);
  EXPECT_NE(id->entropy_digest, digest);
}

TEST_F(TestGuestKvm, EightConnectionsAtOnceAndTheNinthIsRefused) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  std::vector<std::unique_ptr<AgentClient>> clients;
  for (int i = 0; i < 8; ++i) {
    auto c = Connect(*vm);
    ASSERT_TRUE(c) << i;
    clients.push_back(std::move(c));
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (auto& c : clients) {
    threads.emplace_back([&c, &ok] {
      // Large echoes on 8 connections at once overrun the 64 TX slots, so
      // the guest must sleep on a full TX ring and be woken by completions.
      for (int i = 0; i < 20; ++i) {
        const Bytes msg(i % 4 == 0 ? 60000 : 3000, uint8_t(i));
        auto e = c->Echo(msg, client::DeadlineIn(30s));
        ok += e.ok() && *e == msg;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 160);
  auto ninth = AgentClient::ConnectVsock(vm->vsock_path(), protocol::kAgentVsockPort, {},
                                         client::DeadlineIn(5s));
  EXPECT_FALSE(ninth.ok());
  clients.pop_back();  // frees a slot (the VMM resets the guest connection)
  auto again = vm->ConnectAgent(10s);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Ping().ok());
}

TEST_F(TestGuestKvm, MalformedFramesOverVsockKeepTheConnection) {
  auto vm = Boot();
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  protocol::Frame f;
  f.type = protocol::MsgType::kStat;
  f.id = 500;
  f.payload = protocol::TlvBuilder().Str(protocol::Tag::kPath, "/a").Str(protocol::Tag::kPath, "/b").Take();
  auto r = c->RawExchange(500, *protocol::EncodeFrame(f));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->type, protocol::MsgType::kError);
  EXPECT_EQ(protocol::ErrorReply::Decode(r->payload)->code, protocol::ErrorCode::kInvalidArgument);
  protocol::ExecStartRequest ex;
  ex.argv = {"/bin/true"};
  EXPECT_EQ(c->Exec(ex).status().code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(c->Ping().ok());
}

TEST_F(TestGuestKvm, LargeMemoryFillMatchesTheHostChecksum) {
  auto vm = Boot(1, 3, "256M");
  ASSERT_TRUE(vm);
  auto c = Connect(*vm);
  ASSERT_TRUE(c);
  const uint64_t size = 64ull << 20;
  ASSERT_TRUE(c->MemFill(99, size, client::DeadlineIn(60s)).ok());
  auto sum = c->MemChecksum(client::DeadlineIn(60s));
  ASSERT_TRUE(sum.ok()) << sum.status().ToString();
  EXPECT_EQ(sum->size, size);
  EXPECT_EQ(sum->checksum, protocol::ExpectedMemChecksum(99, size));
  EXPECT_EQ(c->MemFill(1, 1ull << 30).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace kubicle::guest::testguest
