// End-to-end tests of kubicle-vmm on this machine's /dev/kvm with the tiny
// test guest: boot, serial, vsock agent, virtio-rng, virtio-blk, vCPUs,
// pause/resume, shutdown and exit codes. Each test runs a real VMM process.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using testing::VmProcess;
using testing::VmProcessOptions;

constexpr char kBanner[] = "kubicle-testguest: up";

class VmmKvmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "/dev/kvm is absent: KVM tests skipped";
  }
  static VmProcessOptions Options() {
    VmProcessOptions o;
    o.vmm_binary = KUBICLE_VMM_BIN;
    o.kernel = KUBICLE_TESTGUEST_ELF;
    return o;
  }
  std::unique_ptr<VmProcess> Boot(const VmProcessOptions& o) {
    auto vm = VmProcess::Start(o);
    EXPECT_TRUE(vm.ok()) << vm.status().ToString();
    if (!vm.ok()) return nullptr;
    return std::move(vm).value();
  }
};

TEST_F(VmmKvmTest, BootsToBanner) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->WaitForSerial(kBanner, 60s).ok()) << vm->SerialOutput();
}

TEST_F(VmmKvmTest, VsockPingAndEcho) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString() << "\n" << vm->SerialOutput();
  EXPECT_TRUE((*agent)->Ping().ok());
  // Small and multi-packet payloads come back byte for byte.
  for (size_t size : {1u, 4000u, 60000u}) {
    guest::protocol::Bytes data(size);
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(i * 7 + size);
    auto echoed = (*agent)->Echo(data);
    ASSERT_TRUE(echoed.ok()) << echoed.status().ToString();
    EXPECT_EQ(*echoed, data);
  }
  // A second, concurrent connection works too.
  auto second = vm->ConnectAgent(10s);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_TRUE((*second)->Ping().ok());
  EXPECT_TRUE((*agent)->Ping().ok());
}

TEST_F(VmmKvmTest, EntropyFromVirtioRng) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  auto a = (*agent)->ReadEntropy(64);
  auto b = (*agent)->ReadEntropy(64);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
  EXPECT_NE(*a, guest::protocol::Bytes(64, 0));
}

TEST_F(VmmKvmTest, GuestMemoryFillAndChecksum) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  ASSERT_TRUE((*agent)->MemFill(42, 256 * 1024).ok());
  auto first = (*agent)->MemChecksum();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE((*agent)->MemFill(43, 256 * 1024).ok());
  auto second = (*agent)->MemChecksum();
  ASSERT_TRUE(second.ok());
  EXPECT_NE(first->checksum, second->checksum);
  ASSERT_TRUE((*agent)->MemFill(42, 256 * 1024).ok());
  EXPECT_EQ((*agent)->MemChecksum()->checksum, first->checksum);
}

TEST_F(VmmKvmTest, TwoVcpusRun) {
  VmProcessOptions o = Options();
  o.vcpus = 2;
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  // The guest starts its AP with INIT-SIPI-SIPI; give it a moment to check in.
  uint32_t cpus = 0;
  for (int i = 0; i < 200 && cpus < 2; ++i) {
    auto id = (*agent)->Identity();
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    cpus = id->cpus;
    if (cpus < 2) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(cpus, 2u) << vm->SerialOutput();
  auto status = vm->Control({{"cmd", "status"}});
  ASSERT_TRUE(status.ok());
  EXPECT_EQ((*status)["vcpus"], 2);
}

TEST_F(VmmKvmTest, PauseStopsTheGuestAndResumeContinues) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  auto paused = vm->Control({{"cmd", "pause"}});
  ASSERT_TRUE(paused.ok());
  ASSERT_EQ((*paused)["ok"], true) << paused->dump();
  EXPECT_EQ((*paused)["state"], "paused");
  // A paused guest cannot answer.
  Status st = (*agent)->Ping(guest::client::DeadlineIn(300ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  auto resumed = vm->Control({{"cmd", "resume"}});
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ((*resumed)["state"], "running");
  auto fresh = vm->ConnectAgent(10s);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE((*fresh)->Ping().ok());
}

TEST_F(VmmKvmTest, ShutdownCommandExitsCleanly) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->WaitForSerial(kBanner, 60s).ok());
  auto r = vm->Control({{"cmd", "shutdown"}});
  ASSERT_TRUE(r.ok());
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
}

TEST_F(VmmKvmTest, SigtermExitsCleanly) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->WaitForSerial(kBanner, 60s).ok());
  ::kill(vm->pid(), SIGTERM);
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 0);
}

TEST_F(VmmKvmTest, BadKernelIsASetupError) {
  VmProcessOptions o = Options();
  o.kernel = ::testing::TempDir() + "/not-a-kernel";
  std::ofstream(o.kernel) << "this is neither an ELF nor a bzImage, just text padding padding";
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(vm->VmmLog().find("neither an ELF nor a bzImage"), std::string::npos) << vm->VmmLog();
}

TEST_F(VmmKvmTest, MissingKernelIsAUsageError) {
  VmProcessOptions o = Options();
  o.kernel = "/nonexistent/kernel";
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(vm->VmmLog().find("/nonexistent/kernel"), std::string::npos) << vm->VmmLog();
}

TEST_F(VmmKvmTest, MemoryOutOfRangeIsAUsageError) {
  VmProcessOptions o = Options();
  o.mem = "4M";
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(vm->VmmLog().find("below the minimum"), std::string::npos) << vm->VmmLog();
}

}  // namespace
}  // namespace kubicle::vmm
