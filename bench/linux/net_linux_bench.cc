// kubicle-bench-net-linux: guest-to-host TCP throughput and round trip of
// the real Linux python guest (same kernel, initramfs and rootfs) under
// kubicle-vmm's virtio-net and under QEMU's, side by side inside the nested
// test host (run it with bench/linux/net-bench.sh). Each VM gets a network
// namespace of its own with tap0 at the gateway address (TestNetns, the
// node's address plan); the host end of every measurement is a socket this
// process opens inside that namespace, so both VMMs carry the same frames
// through the same kind of TAP and nothing else is on the path.
//
// Backends (--backends, comma-separated, all by default):
//   kubicle     kubicle-vmm: virtio-mmio virtio-net on the TAP (no offloads),
//               agent over its userspace vsock
//   qemu        qemu-system-x86_64 -M microvm -accel kvm: virtio-mmio
//               virtio-net-device on -netdev tap (QEMU's userspace device,
//               with its checksum and segmentation offloads), agent over
//               vhost-vsock
//   qemu-nooff  the same with every offload off (what kubicle-vmm offers)
//   qemu-vhost  the same with vhost=on (the kernel's vhost-net)
//
// One guest exec per run and backend: python3 connects to 172.16.0.1,
// streams --mib MiB (256 KiB sendall calls), then echoes on a second
// connection while this process sends --pings 64-byte messages one at a
// time. Both are timed here, on the host's clock: throughput from the first
// byte to the stream's end, the round trip per message. 16 MiB by default:
// kubicle-vmm carries about 0.3 MiB/s in the nested test host, so 64 MiB
// takes over 3 minutes a run there. Runs are
// interleaved across backends so all see the same machine; every VM runs
// (idle) throughout. Prints figures; never asserts on timing. Absolute
// numbers inside the nested test host are not product figures; the
// comparison is.
//
//   kubicle-bench-net-linux [--mib 16] [--pings 1000] [--runs 3]
//                           [--backends kubicle,qemu,qemu-nooff,qemu-vhost]
//                           [--images ENV_FILE]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "common/unique_fd.h"
#include "guest/client/agent_client.h"
#include "noderuntime/network/guest_network.h"
#include "vmm/testing/test_netns.h"
#include "vmm/testing/vm_process.h"

namespace kubicle::bench {
namespace {

using namespace std::chrono_literals;
using guest::client::AgentClient;
using guest::client::DeadlineIn;
namespace plan = noderuntime::network;

constexpr uint16_t kPort = 5201;
constexpr size_t kPingBytes = 64;
constexpr auto kBootTimeout = 240s;

struct Options {
  int mib = 16;
  int pings = 1000;
  int runs = 3;
  std::vector<std::string> backends = {"kubicle", "qemu", "qemu-nooff", "qemu-vhost"};
  std::string images = KUBICLE_LINUX_IMAGES_ENV;
};

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kubicle-bench-net-linux: %s\n", what.c_str());
  std::exit(1);
}

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

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The guest's side of one run (argv[1] = MiB): a stream to the host, then
// an echo of whatever the host sends until it closes.
const char kGuestScript[] = R"(import socket, sys
s = socket.create_connection(("172.16.0.1", 5201))
buf = b"\0" * 262144
for _ in range(int(sys.argv[1]) * 4):
    s.sendall(buf)
s.shutdown(socket.SHUT_WR)
s.recv(16)
s.close()
e = socket.create_connection(("172.16.0.1", 5201))
e.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = e.recv(4096)
    if not d:
        break
    e.sendall(d)
)";

// A listener on the gateway address inside `netns`, made by a short-lived
// thread that enters it (the socket keeps its namespace).
Result<UniqueFd> ListenInNetns(const std::string& netns) {
  Result<UniqueFd> out = Status::Internal("not run");
  std::thread([&] {
    UniqueFd ns(::open(netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!ns.valid() || ::setns(ns.get(), CLONE_NEWNET) != 0) {
      out = Status::FromErrno("entering " + netns);
      return;
    }
    UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(kPort);
    ::inet_pton(AF_INET, plan::kGatewayAddress, &a.sin_addr);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(fd.get(), 4) != 0) {
      out = Status::FromErrno("listening on the gateway address");
      return;
    }
    out = std::move(fd);
  }).join();
  return out;
}

Result<UniqueFd> Accept(int listener) {
  timeval tv{120, 0};
  ::setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return Status::FromErrno("accept (did the guest connect?)");
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

struct RunResult {
  double mib_per_s = 0;
  std::vector<double> rtt_us;
};

// The host's side of one run: receive the stream, then time the pings.
Result<RunResult> HostSide(int listener, int mib, int pings) {
  RunResult r;
  ASSIGN_OR_RETURN(UniqueFd stream, Accept(listener));
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  Clock::time_point first{};
  for (;;) {
    const ssize_t n = ::recv(stream.get(), buf.data(), buf.size(), 0);
    if (n < 0) return Status::FromErrno("receiving the stream");
    if (n == 0) break;
    if (total == 0) first = Clock::now();
    total += uint64_t(n);
  }
  const double secs = std::chrono::duration<double>(Clock::now() - first).count();
  if (total != uint64_t(mib) << 20)
    return Status::DataLoss("the stream carried " + std::to_string(total) + " bytes");
  r.mib_per_s = double(total) / double(1 << 20) / secs;
  if (::send(stream.get(), "done", 4, MSG_NOSIGNAL) != 4) return Status::FromErrno("ack");
  stream.reset();

  ASSIGN_OR_RETURN(UniqueFd echo, Accept(listener));
  char msg[kPingBytes], back[kPingBytes];
  for (int i = 0; i < pings; ++i) {
    std::memset(msg, 'a' + i % 26, sizeof(msg));
    const auto start = Clock::now();
    if (::send(echo.get(), msg, sizeof(msg), MSG_NOSIGNAL) != ssize_t(sizeof(msg)))
      return Status::FromErrno("ping send");
    size_t got = 0;
    while (got < sizeof(back)) {
      const ssize_t n = ::recv(echo.get(), back + got, sizeof(back) - got, 0);
      if (n <= 0) return Status::FromErrno("ping echo");
      got += size_t(n);
    }
    r.rtt_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (std::memcmp(msg, back, sizeof(msg)) != 0) return Status::DataLoss("echo differs");
  }
  return r;
}

// One VM of a backend, its namespace, its agent and its listener.
struct Vm {
  std::string backend;
  std::unique_ptr<vmm::testing::TestNetns> ns;
  std::unique_ptr<vmm::testing::VmProcess> kubicle;  // backend "kubicle"
  pid_t qemu = -1;                                    // the QEMU backends
  std::string qemu_dir;
  std::unique_ptr<AgentClient> agent;
  UniqueFd listener;
  double boot_to_agent_ms = 0;
  RunResult all;  // every run's pings, and each run's throughput below
  std::vector<double> mib_per_s;

  ~Vm() {
    agent.reset();
    kubicle.reset();
    if (qemu > 0) {
      ::kill(qemu, SIGKILL);
      ::waitpid(qemu, nullptr, 0);
    }
    if (!qemu_dir.empty()) std::system(("rm -rf " + qemu_dir).c_str());
  }
};

std::string GuestCmdline() {
  return std::string("console=ttyS0 quiet reboot=k panic=1 kubicle.overlay=tmpfs kubicle.net=") +
         plan::kGuestAddress + "/" + std::to_string(plan::kGuestPrefixLength) + "," +
         plan::kGatewayAddress + " kubicle.clock=" + std::to_string(std::time(nullptr));
}

Status BootKubicle(Vm& vm, const std::map<std::string, std::string>& images,
                   const std::string& mac) {
  vmm::testing::VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = images.at("KUBICLE_LINUX_KERNEL");
  o.mem = "512M";
  o.vcpus = 1;
  o.cmdline = GuestCmdline();
  o.disks = {images.at("KUBICLE_LINUX_ROOTFS_PYTHON") + ",ro"};
  o.extra_args = {"--initrd", images.at("KUBICLE_LINUX_INITRAMFS"), "--net", vm.ns->NetFlag(mac)};
  ASSIGN_OR_RETURN(vm.kubicle, vmm::testing::VmProcess::Start(o));
  auto agent = vm.kubicle->ConnectAgent(kBootTimeout);
  if (!agent.ok())
    return agent.status().WithContext("serial:\n" + vm.kubicle->SerialOutput() + "\nvmm log:\n" +
                                      vm.kubicle->VmmLog());
  vm.agent = std::move(*agent);
  return Status::Ok();
}

void WarmCache(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<char> buf(1 << 20);
  while (fd.valid() && ::read(fd.get(), buf.data(), buf.size()) > 0) {
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// QEMU in the VM's namespace (the child enters it before exec, as
// kubicle-vmm's TAP thread does), its agent over vhost-vsock at `cid`.
Status BootQemu(Vm& vm, const std::map<std::string, std::string>& images, const std::string& mac,
                uint32_t cid) {
  char dir[] = "/tmp/kubicle-bench-qemu-XXXXXX";
  if (!::mkdtemp(dir)) return Status::FromErrno("mkdtemp");
  vm.qemu_dir = dir;
  std::string netdev = "tap,id=n0,ifname=" + std::string(plan::kTapName) +
                       ",script=no,downscript=no";
  std::string nic = "virtio-net-device,netdev=n0,mac=" + mac;
  if (vm.backend == "qemu-vhost") netdev += ",vhost=on";
  if (vm.backend == "qemu-nooff") {
    for (const char* f : {"csum", "guest_csum", "gso", "guest_tso4", "guest_tso6", "guest_ecn",
                          "guest_ufo", "host_tso4", "host_tso6", "host_ecn", "host_ufo",
                          "mrg_rxbuf"})
      nic += std::string(",") + f + "=off";
  }
  const std::vector<std::string> args = {
      "qemu-system-x86_64", "-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,acpi=off",
      "-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", "512M", "-nodefaults",
      "-no-user-config", "-display", "none", "-serial", "file:" + vm.qemu_dir + "/serial.log",
      "-kernel", images.at("KUBICLE_LINUX_KERNEL"), "-initrd", images.at("KUBICLE_LINUX_INITRAMFS"),
      "-append", GuestCmdline(),
      "-drive", "id=root,file=" + images.at("KUBICLE_LINUX_ROOTFS_PYTHON") +
                    ",format=raw,if=none,readonly=on",
      "-device", "virtio-blk-device,drive=root", "-netdev", netdev, "-device", nic,
      "-device", "vhost-vsock-device,guest-cid=" + std::to_string(cid),
      "-device", "virtio-rng-device"};
  const std::string log = vm.qemu_dir + "/qemu.log", netns = vm.ns->path();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::FromErrno("fork");
  if (pid == 0) {
    const int ns = ::open(netns.c_str(), O_RDONLY);
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0 || out < 0) ::_exit(126);
    ::dup2(out, 1);
    ::dup2(out, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  vm.qemu = pid;
  const auto deadline = Clock::now() + kBootTimeout;
  while (Clock::now() < deadline) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      vm.qemu = -1;
      return Status::Internal("QEMU exited (status " + std::to_string(st) + "):\n" +
                              ReadFile(log) + ReadFile(vm.qemu_dir + "/serial.log"));
    }
    UniqueFd fd(::socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Status::FromErrno("socket(AF_VSOCK) (is vhost_vsock loaded?)");
    sockaddr_vm a{};
    a.svm_family = AF_VSOCK;
    a.svm_cid = cid;
    a.svm_port = 1024;  // the agent's port (guest/linux/init.sh)
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      auto agent = AgentClient::Adopt(std::move(fd), {}, DeadlineIn(30s));
      if (!agent.ok()) return agent.status();
      vm.agent = std::move(*agent);
      return Status::Ok();
    }
    std::this_thread::sleep_for(200ms);
  }
  return Status::DeadlineExceeded("QEMU's guest agent did not answer:\n" +
                                  ReadFile(vm.qemu_dir + "/serial.log"));
}

Result<std::unique_ptr<Vm>> Boot(const std::string& backend, int index,
                                 const std::map<std::string, std::string>& images) {
  auto vm = std::make_unique<Vm>();
  vm->backend = backend;
  ASSIGN_OR_RETURN(vm->ns, vmm::testing::TestNetns::Create());
  char mac[18];
  std::snprintf(mac, sizeof(mac), "02:6b:75:00:10:%02x", index + 1);
  const auto start = Clock::now();
  std::fprintf(stderr, "booting %s\n", backend.c_str());
  if (backend == "kubicle") {
    RETURN_IF_ERROR(BootKubicle(*vm, images, mac));
  } else if (backend == "qemu" || backend == "qemu-nooff" || backend == "qemu-vhost") {
    RETURN_IF_ERROR(BootQemu(*vm, images, mac, 1000 + uint32_t(::getpid() % 1000) * 8 +
                                                   uint32_t(index)));
  } else {
    return Status::InvalidArgument("unknown backend " + backend);
  }
  vm->boot_to_agent_ms = MillisSince(start);
  ASSIGN_OR_RETURN(vm->listener, ListenInNetns(vm->ns->path()));
  return vm;
}

Status RunOnce(Vm& vm, const Options& o) {
  guest::protocol::ExecStartRequest req;
  req.argv = {"python3", "-c", kGuestScript, std::to_string(o.mib)};
  Result<guest::client::ExecResult> exec = Status::Internal("not run");
  std::thread guest([&] { exec = vm.agent->Exec(req, {}, DeadlineIn(600s)); });
  // On a failure HostSide's sockets are closed, which ends the guest's script.
  auto host = HostSide(vm.listener.get(), o.mib, o.pings);
  guest.join();
  if (!exec.ok()) return exec.status().WithContext("the guest's exec");
  if (exec->exit_code != 0)
    return Status::Internal("the guest's script failed: " +
                            std::string(exec->stderr_data.begin(), exec->stderr_data.end()));
  if (!host.ok()) return host.status();
  vm.mib_per_s.push_back(host->mib_per_s);
  vm.all.rtt_us.insert(vm.all.rtt_us.end(), host->rtt_us.begin(), host->rtt_us.end());
  std::printf("  run: %-11s %8.1f MiB/s   rtt p50 %7.1f us\n", vm.backend.c_str(),
              host->mib_per_s, Percentile(host->rtt_us, 50));
  std::fflush(stdout);
  return Status::Ok();
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--mib") o.mib = std::atoi(value().c_str());
    else if (a == "--pings") o.pings = std::atoi(value().c_str());
    else if (a == "--runs") o.runs = std::atoi(value().c_str());
    else if (a == "--backends") o.backends = Split(value(), ',');
    else if (a == "--images") o.images = value();
    else Die("usage: kubicle-bench-net-linux [--mib N] [--pings N] [--runs N] "
             "[--backends kubicle,qemu,qemu-nooff,qemu-vhost] [--images ENV_FILE]");
  }
  if (o.mib < 1 || o.pings < 1 || o.runs < 1 || o.backends.empty()) Die("bad arguments");
  return o;
}

int Main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  const auto images = ReadEnvFile(o.images);
  for (const char* key :
       {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS", "KUBICLE_LINUX_ROOTFS_PYTHON"}) {
    if (!images.count(key)) Die(std::string(key) + " missing from " + o.images);
  }
  if (::access("/dev/kvm", R_OK | W_OK) != 0)
    Die("/dev/kvm is not usable: run this inside the nested test host (bench/linux/net-bench.sh)");
  // The images come over 9p: read them once so the first VM to boot does
  // not pay for every backend (boot to agent is printed for each).
  for (const char* key :
       {"KUBICLE_LINUX_KERNEL", "KUBICLE_LINUX_INITRAMFS", "KUBICLE_LINUX_ROOTFS_PYTHON"})
    WarmCache(images.at(key));
  std::vector<std::unique_ptr<Vm>> vms;
  for (size_t i = 0; i < o.backends.size(); ++i) {
    auto vm = Boot(o.backends[i], int(i), images);
    if (!vm.ok()) Die("booting " + o.backends[i] + ": " + vm.status().ToString());
    vms.push_back(std::move(*vm));
  }
  std::printf("guest-to-host TCP, python guest (1 vCPU, 512 MiB), %d MiB stream, %d x %zu-byte "
              "ping-pong, %d runs interleaved\n", o.mib, o.pings, kPingBytes, o.runs);
  for (auto& vm : vms)
    std::printf("  %-11s boot to agent %.0f ms\n", vm->backend.c_str(), vm->boot_to_agent_ms);
  for (int run = 0; run < o.runs; ++run) {
    for (auto& vm : vms) {
      Status st = RunOnce(*vm, o);
      if (!st.ok()) Die(vm->backend + ": " + st.ToString());
    }
  }
  std::printf("\n%-11s %14s %14s %14s %14s\n", "backend", "MiB/s median", "MiB/s best",
              "RTT p50 us", "RTT p99 us");
  for (auto& vm : vms) {
    std::printf("%-11s %14.1f %14.1f %14.1f %14.1f\n", vm->backend.c_str(),
                Percentile(vm->mib_per_s, 50), Percentile(vm->mib_per_s, 100),
                Percentile(vm->all.rtt_us, 50), Percentile(vm->all.rtt_us, 99));
  }
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
