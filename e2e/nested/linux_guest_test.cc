// linux tier: kubicle-vmm boots the real Linux guest (our vmlinux, the
// initramfs with kubicle-agent, the python rootfs under a tmpfs overlay) and
// the host drives it over vsock with AgentClient. Runs inside the nested KVM
// test host (run-in-testhost.py): this machine's own KVM cannot boot Linux.
//
// The image paths come from images.env, written by prepare-images.sh (the
// CTest fixture linux_images). Missing images or /dev/kvm are failures, not
// skips: this tier must run in CI.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "guest/client/agent_client.h"
#include "guest/protocol/tlv.h"
#include "e2e/nested/test_watchdog.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::e2e::nested {
namespace {

using namespace std::chrono_literals;
using guest::client::AgentClient;
using guest::client::DeadlineIn;
using guest::protocol::Bytes;
using guest::protocol::ExecStartRequest;
using vmm::testing::VmProcess;
using vmm::testing::VmProcessOptions;

// A hang fails the test binary in minutes, with a report, instead of at the
// harness's hard timeout with none (test_watchdog.h).
const bool kWatchdogStarted = (StartWatchdog(std::chrono::seconds(300)), true);

std::map<std::string, std::string> ReadEnvFile(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

constexpr int kGuestVcpus = 2;

std::string Str(const Bytes& b) { return std::string(b.begin(), b.end()); }

// One booted guest, shared by the tests of a suite (booting is the slow part).
struct Guest {
  std::unique_ptr<VmProcess> vm;
  std::unique_ptr<AgentClient> agent;
  double boot_to_agent_ms = 0;  // kubicle-vmm start to the agent's HELLO
  double guest_uptime_ms = 0;   // the guest's own clock at that point
};

// One boot of kubicle-vmm with our kernel and initramfs, waiting `patience`
// for the agent. `verbose` drops "quiet" so the serial log shows how far the
// kernel got.
Result<Guest> BootGuestOnce(std::vector<std::string> disks, const std::string& extra_cmdline,
                            std::chrono::seconds patience, bool verbose) {
  const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
  VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = images.at("KUBICLE_LINUX_KERNEL");
  o.mem = "512M";
  o.vcpus = kGuestVcpus;
  // quiet: every console byte is a port-I/O exit, which is slow when nested.
  o.cmdline = std::string("console=ttyS0 ") + (verbose ? "loglevel=7" : "quiet") +
              " reboot=k panic=1 i8042.noaux i8042.nomux i8042.dumbkbd " +
              "kubicle.clock=" + std::to_string(std::time(nullptr)) + " " + extra_cmdline;
  o.extra_args = {"--initrd", images.at("KUBICLE_LINUX_INITRAMFS")};
  o.disks = std::move(disks);
  Guest g;
  const auto start = std::chrono::steady_clock::now();
  Progress("starting kubicle-vmm (" + extra_cmdline + (verbose ? ", verbose console" : "") + ")");
  ASSIGN_OR_RETURN(g.vm, VmProcess::Start(o));
  WatchVmDir(g.vm->dir());
  Progress("waiting for the agent of pid " + std::to_string(g.vm->pid()));
  auto agent = g.vm->ConnectAgent(patience);
  if (!agent.ok()) {
    return agent.status().WithContext("serial:\n" + g.vm->SerialOutput() + "\nvmm log:\n" +
                                      g.vm->VmmLog());
  }
  g.agent = std::move(*agent);
  g.boot_to_agent_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  Progress("agent answered; asking its identity");
  auto id = g.agent->Identity();
  if (id.ok()) g.guest_uptime_ms = double(id->uptime_ns) / 1e6;
  Progress("guest booted");
  return g;
}

// Boots the guest; `disks` ("path" or "path,ro") may be empty. A boot whose
// agent is silent for 90 s is tried once more with a verbose console: the
// nested test host's emulated guest kernel mode (QEMU TCG under nested SVM)
// has been seen to stall a boot with nothing on a quiet console, and a
// second stall then fails the test with the kernel's own log. A boot takes
// seconds here, so 90 s is a stall, not a slow machine.
Result<Guest> BootGuest(std::vector<std::string> disks, const std::string& extra_cmdline) {
  const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
  for (const char* key : {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS"}) {
    auto it = images.find(key);
    if (it == images.end() || ::access(it->second.c_str(), R_OK) != 0) {
      return Status::FailedPrecondition(std::string(key) + " missing from " +
                                        KUBICLE_LINUX_IMAGES_ENV +
                                        ": run e2e/nested/prepare-images.sh (the linux_images "
                                        "CTest fixture does)");
    }
  }
  if (::access("/dev/kvm", R_OK | W_OK) != 0) {
    return Status::FailedPrecondition("/dev/kvm is not usable: run this inside the nested "
                                      "test host (e2e/nested/run-in-testhost.py)");
  }
  auto first = BootGuestOnce(disks, extra_cmdline, 90s, /*verbose=*/false);
  if (first.ok() || first.status().code() != StatusCode::kDeadlineExceeded) return first;
  std::fprintf(stderr, "WARNING: the guest's first boot stalled; booting it again with a "
                       "verbose console. First boot: %s\n",
               first.status().ToString().c_str());
  return BootGuestOnce(std::move(disks), extra_cmdline, 150s, /*verbose=*/true);
}

class PythonGuestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
    auto it = images.find("KUBICLE_LINUX_ROOTFS_PYTHON");
    const std::string rootfs = it == images.end() ? std::string() : it->second;
    auto g = BootGuest({rootfs + ",ro"}, "kubicle.hostname=py-guest kubicle.overlay=tmpfs");
    if (!g.ok()) {
      boot_error_ = new std::string(g.status().ToString());
      return;
    }
    guest_ = new Guest(std::move(*g));
    std::printf("linux guest (python rootfs): boot-to-agent %.0f ms (guest uptime %.0f ms)\n",
                guest_->boot_to_agent_ms, guest_->guest_uptime_ms);
  }
  static void TearDownTestSuite() {
    delete guest_;
    guest_ = nullptr;
    delete boot_error_;
    boot_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(boot_error_, nullptr) << *boot_error_;
    ASSERT_NE(guest_, nullptr);
    ASSERT_NE(guest_->agent, nullptr) << "the guest was shut down by an earlier test";
    RecordProperty("boot_to_agent_ms", std::to_string(int(guest_->boot_to_agent_ms)));
  }
  AgentClient& agent() { return *guest_->agent; }
  guest::client::ExecResult Run(ExecStartRequest req) {
    auto r = agent().Exec(req, {}, DeadlineIn(120s));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : guest::client::ExecResult{};
  }

  static Guest* guest_;
  static std::string* boot_error_;
};
Guest* PythonGuestTest::guest_ = nullptr;
std::string* PythonGuestTest::boot_error_ = nullptr;

TEST_F(PythonGuestTest, AgentAnswersWithTheGuestsIdentity) {
  ASSERT_TRUE(agent().Ping().ok());
  EXPECT_EQ(agent().agent().name, "kubicle-agent");
  auto id = agent().Identity();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->hostname, "py-guest");
  EXPECT_EQ(id->cpus, uint32_t(kGuestVcpus));
  EXPECT_GT(id->memory_bytes, 400ull << 20);
  EXPECT_LT(id->memory_bytes, 512ull << 20);
  EXPECT_EQ(id->cid, 3u);
  EXPECT_EQ(id->boot_id.size(), 16u);
  // The root is the python image under a tmpfs overlay.
  ExecStartRequest req;
  req.argv = {"cat", "/proc/mounts"};
  auto mounts = Run(req);
  EXPECT_NE(Str(mounts.stdout_data).find("overlay / overlay"), std::string::npos)
      << Str(mounts.stdout_data);
}

TEST_F(PythonGuestTest, PythonRunsAndItsOutputExitCodeAndFilesComeBack) {
  ExecStartRequest req;
  req.argv = {"python3", "-c",
              "import sys, platform\n"
              "print(sum(range(10)), platform.python_version_tuple()[0])\n"
              "open('/root/written.txt', 'w').write('written by python in the guest')\n"
              "sys.stderr.write('to stderr\\n')\n"
              "sys.exit(7)\n"};
  auto r = Run(req);
  EXPECT_EQ(Str(r.stdout_data), "45 3\n");
  EXPECT_EQ(Str(r.stderr_data), "to stderr\n");
  ASSERT_TRUE(r.exit_code.has_value());
  EXPECT_EQ(*r.exit_code, 7);
  auto file = agent().ReadFile("/root/written.txt");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(Str(*file), "written by python in the guest");

  // A script and its input go in as files and stdin.
  const std::string script = "import sys\nprint(sys.stdin.read().upper(), end='')\n";
  ASSERT_TRUE(agent().WriteFile("/root/upper.py", Bytes(script.begin(), script.end())).ok());
  ExecStartRequest run;
  run.argv = {"python3", "/root/upper.py"};
  run.cwd = "/root";
  const std::string input = "hello from the host";
  run.stdin_data.assign(input.begin(), input.end());
  auto out = Run(run);
  EXPECT_EQ(Str(out.stdout_data), "HELLO FROM THE HOST");
  EXPECT_EQ(out.exit_code, 0);
}

TEST_F(PythonGuestTest, LargeBinaryFilesRoundTrip) {
  Bytes data(3 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t((i * 2654435761u) >> 13);
  ASSERT_TRUE(agent().WriteFile("/root/blob", data, {}, DeadlineIn(120s)).ok());
  ExecStartRequest req;
  req.argv = {"python3", "-c",
              "import hashlib; print(hashlib.sha256(open('/root/blob','rb').read()).hexdigest())"};
  auto r = Run(req);
  auto back = agent().ReadFile("/root/blob", DeadlineIn(120s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  EXPECT_EQ(r.stdout_data.size(), 65u);  // 64 hex digits and a newline
}

TEST_F(PythonGuestTest, TimeoutKillsARunawayProcess) {
  ExecStartRequest req;
  req.argv = {"python3", "-c", "while True: pass"};
  req.timeout_ms = 3000;
  auto r = Run(req);
  EXPECT_TRUE(r.timed_out);
  ASSERT_TRUE(r.signal.has_value());
  EXPECT_EQ(*r.signal, uint32_t(SIGKILL));
  // Gone, and reaped by the agent (PID 1).
  ExecStartRequest check;
  check.shell_command = "test -e /proc/" + std::to_string(r.pid) + " && echo alive || echo gone";
  EXPECT_EQ(Str(Run(check).stdout_data), "gone\n");
  EXPECT_TRUE(agent().Ping().ok());
}

TEST_F(PythonGuestTest, PostRestoreHookWorksInTheGuest) {
  guest::protocol::PostRestoreRequest req;
  req.generation = 5;
  req.hostname = "py-clone-5";
  req.wall_clock_ns = uint64_t(std::time(nullptr)) * 1000000000ull;
  req.entropy_seed = Bytes(32, 0x42);
  auto raw = agent().RawExchange(
      4000, *guest::protocol::EncodeFrame(guest::protocol::MakeFrame(req, 4000)));
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  ASSERT_EQ(raw->type, guest::protocol::MsgType::kPostRestore);
  // As PID 1 (root) in the guest every step must really happen: no warnings.
  guest::protocol::FieldReader fields(raw->payload);
  EXPECT_EQ(fields.Str(guest::protocol::Tag::kErrorMessage, 4096).value_or(""), "");
  ExecStartRequest host;
  host.argv = {"python3", "-c", "import socket, time; print(socket.gethostname(), int(time.time()))"};
  auto r = Run(host);
  const std::string out = Str(r.stdout_data);
  EXPECT_EQ(out.substr(0, out.find(' ')), "py-clone-5");
  const long guest_now = std::stol(out.substr(out.find(' ') + 1));
  EXPECT_LT(std::labs(guest_now - long(std::time(nullptr))), 60) << out;
}

// Last test of the suite: it powers the guest off.
TEST_F(PythonGuestTest, ZzGuestShutsDownCleanly) {
  ExecStartRequest req;
  req.shell_command = "kill -TERM 1";
  req.background = true;  // the agent goes away with the guest
  Progress("exec: kill -TERM 1");
  auto r = agent().Exec(req, {}, DeadlineIn(60s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Progress("waiting for kubicle-vmm to exit");
  auto code = guest_->vm->Wait(120s);
  ASSERT_TRUE(code.ok()) << code.status().ToString() << "\n" << guest_->vm->SerialOutput();
  EXPECT_EQ(*code, 0) << guest_->vm->VmmLog();
  EXPECT_NE(guest_->vm->SerialOutput().find("power off"), std::string::npos);
  guest_->agent.reset();
}

// Without a disk the agent runs straight from the initramfs.
TEST(InitramfsOnlyGuestTest, AgentRunsWithoutARootDisk) {
  auto g = BootGuest({}, "kubicle.hostname=bare");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::printf("linux guest (initramfs only): boot-to-agent %.0f ms (guest uptime %.0f ms)\n",
              g->boot_to_agent_ms, g->guest_uptime_ms);
  ExecStartRequest req;
  req.shell_command = "hostname; busybox | head -n 1 | cut -d' ' -f1";
  Progress("exec: hostname; busybox");
  auto r = g->agent->Exec(req, {}, DeadlineIn(60s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Str(r->stdout_data), "bare\nBusyBox\n");
  ExecStartRequest off;
  off.shell_command = "reboot -f";
  off.background = true;
  Progress("exec: reboot -f");
  ASSERT_TRUE(g->agent->Exec(off, {}, DeadlineIn(60s)).ok());
  Progress("waiting for kubicle-vmm to exit");
  auto code = g->vm->Wait(120s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
}

// The minimal (busybox) rootfs, read-only, under an overlay kept on a second
// disk: what the guest writes lands on that disk and survives the VM.
TEST(OverlayDiskGuestTest, WritesLandOnTheOverlayDisk) {
  const auto images = ReadEnvFile(KUBICLE_LINUX_IMAGES_ENV);
  ASSERT_TRUE(images.count("KUBICLE_LINUX_ROOTFS_MINIMAL"));
  char dir[] = "/tmp/kubicle-overlay-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string upper = std::string(dir) + "/upper.ext4";
  ASSERT_EQ(std::system(("mke2fs -q -t ext4 " + upper + " 64M").c_str()), 0);
  auto g = BootGuest({images.at("KUBICLE_LINUX_ROOTFS_MINIMAL") + ",ro", upper},
                     "kubicle.hostname=overlay kubicle.overlay=/dev/vdb");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ExecStartRequest req;
  req.shell_command = "grep -c ' / overlay ' /proc/mounts; echo kept > /root/persist.txt; sync";
  auto r = g->agent->Exec(req, {}, DeadlineIn(60s));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Str(r->stdout_data), "1\n");
  ExecStartRequest off;
  off.shell_command = "kill -TERM 1";
  off.background = true;
  Progress("exec: kill -TERM 1");
  ASSERT_TRUE(g->agent->Exec(off, {}, DeadlineIn(60s)).ok());
  Progress("waiting for kubicle-vmm to exit");
  auto code = g->vm->Wait(120s);
  ASSERT_TRUE(code.ok()) << code.status().ToString();
  EXPECT_EQ(*code, 0);
  // Read the file back from the overlay disk, without mounting it.
  const std::string out = std::string(dir) + "/out.txt";
  ASSERT_EQ(std::system(("debugfs -R 'cat /upper/root/persist.txt' " + upper + " > " + out +
                         " 2>/dev/null").c_str()),
            0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "kept");
  std::system(("rm -rf " + std::string(dir)).c_str());
}

}  // namespace
}  // namespace kubicle::e2e::nested
