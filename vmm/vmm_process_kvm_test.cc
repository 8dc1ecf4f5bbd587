// End-to-end tests of kubicle-vmm on this machine's /dev/kvm with the tiny
// test guest: boot, serial, vsock agent, virtio-rng, virtio-blk, vCPUs,
// pause/resume, shutdown and exit codes. Each test runs a real VMM process.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "vmm/testing/vm_process.h"

namespace kubicle::vmm {
namespace {

using namespace std::chrono_literals;
using testing::VmProcess;
using testing::VmProcessOptions;

constexpr char kBanner[] = "kubicle-testguest: up";

// Writes a minimal ELF64 x86-64 image whose 64-bit entry point runs `code`
// from 1 MiB; one PT_LOAD covering the whole file.
std::string WriteTinyElf(const std::string& name, const std::vector<uint8_t>& code) {
  constexpr uint64_t kBase = 0x100000, kHeaders = 64 + 56;
  std::vector<uint8_t> f(kHeaders);
  auto put = [&f](size_t off, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) f[off + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  const uint8_t ident[] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  std::copy(std::begin(ident), std::end(ident), f.begin());
  put(16, 2, 2);                  // ET_EXEC
  put(18, 62, 2);                 // EM_X86_64
  put(20, 1, 4);                  // EV_CURRENT
  put(24, kBase + kHeaders, 8);   // e_entry
  put(32, 64, 8);                 // e_phoff
  put(52, 64, 2);                 // e_ehsize
  put(54, 56, 2);                 // e_phentsize
  put(56, 1, 2);                  // e_phnum
  f.insert(f.end(), code.begin(), code.end());
  put(64, 1, 4);                  // PT_LOAD
  put(68, 5, 4);                  // R+X
  put(72, 0, 8);                  // p_offset
  put(80, kBase, 8);              // p_vaddr
  put(88, kBase, 8);              // p_paddr
  put(96, f.size(), 8);           // p_filesz
  put(104, f.size(), 8);          // p_memsz
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(f.data()), f.size());
  return path;
}

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
  auto status = vm->control().GetStatus(10s);
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->vcpus, 2);
}

TEST_F(VmmKvmTest, PauseStopsTheGuestAndResumeContinues) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  auto paused = vm->control().Pause(10s);
  ASSERT_TRUE(paused.ok()) << paused.status().ToString();
  EXPECT_EQ(paused->state, control::VmState::kPaused);
  // A paused guest cannot answer.
  Status st = (*agent)->Ping(guest::client::DeadlineIn(300ms));
  EXPECT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.ToString();
  auto resumed = vm->control().Resume(10s);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->state, control::VmState::kRunning);
  auto fresh = vm->ConnectAgent(10s);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_TRUE((*fresh)->Ping().ok());
}

TEST_F(VmmKvmTest, ShutdownCommandExitsCleanly) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->WaitForSerial(kBanner, 60s).ok());
  ASSERT_TRUE(vm->control().Shutdown(10s).ok());
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
}

bool Connects(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

// Processes whose command line mentions `needle` (the VMM's teardown helper
// shares its memory, so it has the same command line).
int ProcessesMentioning(const std::string& needle) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    std::ifstream in(e.path() / "cmdline", std::ios::binary);
    std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    n += cmd.find(needle) != std::string::npos;
  }
  return n;
}

// Exit does not wait for the kernel's VM teardown (fast_exit.h), yet leaves
// nothing: the sockets refuse at once and the teardown helper goes away.
TEST_F(VmmKvmTest, ShutdownLeavesNoSocketOrHelperBehind) {
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString();
  ASSERT_TRUE(vm->control().Shutdown(10s).ok());
  auto code = vm->Wait(10s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(Connects(vm->control_path()));
  EXPECT_FALSE(Connects(vm->vsock_path()));
  EXPECT_FALSE((*agent)->Ping(std::chrono::steady_clock::now() + 5s).ok());
  int left = ProcessesMentioning(vm->dir());
  for (int i = 0; i < 1000 && left > 0; ++i) {
    std::this_thread::sleep_for(10ms);
    left = ProcessesMentioning(vm->dir());
  }
  EXPECT_EQ(left, 0) << "the teardown helper outlived 10 s";
}

// A field of /proc/<path>/status, e.g. StatusField("self", "Seccomp_filters").
std::string StatusField(const std::string& path, const std::string& field) {
  std::ifstream in("/proc/" + path + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return line.substr(line.find_last_of(" \t") + 1);
  return "?";
}

// Every thread of a running VMM is under its filter, one more than this
// test runs under (docs/vmm.md, "Seccomp"), and the guest still runs and
// answers; off adds none.
TEST_F(VmmKvmTest, TheRunningVmmIsUnderItsSeccompFilter) {
  const int inherited = std::stoi(StatusField("self", "Seccomp_filters"));
  auto vm = Boot(Options());
  ASSERT_TRUE(vm);
  auto agent = vm->ConnectAgent(60s);
  ASSERT_TRUE(agent.ok()) << agent.status().ToString() << "\n" << vm->VmmLog();
  EXPECT_TRUE((*agent)->Ping().ok());
  const std::string pid = std::to_string(vm->pid());
  EXPECT_EQ(StatusField(pid, "NoNewPrivs"), "1");
  size_t threads = 0;
  for (const auto& t : std::filesystem::directory_iterator("/proc/" + pid + "/task")) {
    ++threads;
    const std::string task = pid + "/task/" + t.path().filename().string();
    EXPECT_EQ(StatusField(task, "Seccomp"), "2") << task;
    EXPECT_EQ(StatusField(task, "Seccomp_filters"), std::to_string(inherited + 1)) << task;
  }
  EXPECT_GT(threads, 1u);

  VmProcessOptions off = Options();
  off.extra_args = {"--seccomp", "off"};
  auto unconfined = Boot(off);
  ASSERT_TRUE(unconfined);
  ASSERT_TRUE(unconfined->WaitForSerial(kBanner, 60s).ok());
  EXPECT_EQ(StatusField(std::to_string(unconfined->pid()), "Seccomp_filters"), std::to_string(inherited));
}

// The VMM binds its sockets before anyone could chmod them: whatever umask
// it inherits, they are its owner's alone from the moment they exist.
TEST_F(VmmKvmTest, SocketsArePrivateFromBindWhateverTheUmask) {
  const mode_t old_umask = ::umask(0);
  auto vm = Boot(Options());
  ::umask(old_umask);
  ASSERT_TRUE(vm);
  ASSERT_TRUE(vm->ConnectAgent(60s).ok()) << vm->SerialOutput();
  for (const std::string& path : {vm->control_path(), vm->vsock_path()}) {
    struct stat st {};
    ASSERT_EQ(::lstat(path.c_str(), &st), 0) << path;
    EXPECT_TRUE(S_ISSOCK(st.st_mode)) << path;
    EXPECT_EQ(st.st_mode & 077, 0u) << path << ": group or others have access";
  }
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

TEST_F(VmmKvmTest, TripleFaultIsAGuestCrash) {
  VmProcessOptions o = Options();
  // ud2 with no usable IDT: #UD -> #GP -> #DF -> triple fault.
  o.kernel = WriteTinyElf("triple-fault.elf", {0x0f, 0x0b});
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto code = vm->Wait(30s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 3) << vm->VmmLog();
  EXPECT_NE(vm->VmmLog().find("triple fault"), std::string::npos) << vm->VmmLog();
}

TEST_F(VmmKvmTest, GuestResetThroughI8042ExitsCleanly) {
  VmProcessOptions o = Options();
  // mov al, 0xfe; out 0x64, al  (keyboard controller pulse: CPU reset)
  o.kernel = WriteTinyElf("reset.elf", {0xb0, 0xfe, 0xe6, 0x64, 0xeb, 0xfe});
  auto vm = Boot(o);
  ASSERT_TRUE(vm);
  auto code = vm->Wait(30s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0) << vm->VmmLog();
  EXPECT_NE(vm->VmmLog().find("i8042"), std::string::npos) << vm->VmmLog();
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
