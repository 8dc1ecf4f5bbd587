// kubicle-bench-vmm: figures for kubicle-vmm with the tiny test guest on this
// machine's KVM. Prints cold boot to agent answering (p50/p99), vsock ping
// round trip (p50/p99), and the private memory of one idle kubicle-vmm beyond
// guest-touched pages, and restore of a snapshot into a new kubicle-vmm
// process (`kubicle-vmm restore`, cold: process start and KVM setup
// included) and into a warm-pool process (`kubicle-vmm pool`, restore
// request to agent answering), p50/p99; fork of a running guest to the
// child's agent answering (p50/p99) and a 20-way fork until all answer;
// then fork at 128 MiB, 512 MiB and 2 GiB of guest memory (32 MiB of it
// written by the parent): fork to child answering p50/p99, the child's
// start-up steps (from its "fork child running" log line) and the private
// memory of one idle child; and shutdown request to process exit. With
// --only net: restore and fork without and with a NIC (net_bench.h).
//
//   build/bench/vmm/kubicle-bench-vmm [--runs N] [--pings N] [--fork-sizes 128M,512M,2G]
//                                     [--only fork-sizes|fork20|fork-disk|shutdown|net]
//                                     [--seccomp enforce|log|off]  (what the filter costs)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "bench/vmm/net_bench.h"
#include "bench/vmm/vmm_log.h"
#include "common/flag_args.h"
#include "vmm/testing/vm_process.h"

namespace {

using namespace std::chrono_literals;
using kubicle::bench::Clock;
using kubicle::bench::LogField;
using kubicle::bench::MillisSince;
using kubicle::vmm::control::ForkChild;
using kubicle::vmm::control::ForkRequest;
using kubicle::vmm::control::GuestMemoryRange;
using kubicle::vmm::testing::VmProcess;
using kubicle::vmm::testing::VmProcessOptions;
using kubicle::guest::client::AgentClient;
using kubicle::Result;

// Every control request here (snapshot, restore, fork, status, shutdown) is
// answered well within this on the test guest.
constexpr auto kControlTimeout = 10s;

struct PrivateMemory {
  uint64_t vmm_kib = 0;    // private pages outside guest RAM
  uint64_t guest_kib = 0;  // private pages of guest RAM (what the guest touched)
};

// Sums Private_Clean + Private_Dirty per mapping from /proc/<pid>/smaps,
// splitting guest RAM (host ranges reported by the control socket) from the rest.
PrivateMemory MeasurePrivate(pid_t pid, const std::vector<GuestMemoryRange>& guest_ranges) {
  PrivateMemory m;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in_guest = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &start, &end) == 2 && line.find(':') > 8) {
      in_guest = false;
      for (const GuestMemoryRange& r : guest_ranges) {
        if (start >= r.host && end <= r.host + r.size) in_guest = true;
      }
      continue;
    }
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "Private_Clean: %llu kB", &kib) == 1 ||
        std::sscanf(line.c_str(), "Private_Dirty: %llu kB", &kib) == 1) {
      (in_guest ? m.guest_kib : m.vmm_kib) += kib;
    }
  }
  return m;
}

// Boots a guest, snapshots it (paused), then restores it `runs` times into
// new processes (spawn to the first answered agent request), and `runs`
// times into warm-pool processes (restore request to agent answering).
bool MeasureRestore(const VmProcessOptions& o, int runs, std::vector<double>* out,
                    std::vector<double>* warm) {
  auto src = VmProcess::Start(o);
  if (!src.ok()) return std::fprintf(stderr, "start: %s\n", src.status().ToString().c_str()), false;
  if (!(*src)->ConnectAgent(60s).ok()) return std::fprintf(stderr, "agent did not answer\n"), false;
  std::string snap = (*src)->dir() + "/snapshot";
  auto r = (*src)->control().Snapshot({.dir = snap, .resume = false}, kControlTimeout);
  if (!r.ok()) {
    std::fprintf(stderr, "snapshot failed: %s\n", r.status().ToString().c_str());
    return false;
  }
  for (int run = 0; run < runs; ++run) {
    VmProcessOptions ro = o;
    ro.restore_from = snap;
    ro.cid = 100 + run;
    auto start = Clock::now();
    auto vm = VmProcess::Start(ro);
    if (!vm.ok()) return std::fprintf(stderr, "restore: %s\n", vm.status().ToString().c_str()), false;
    auto agent = (*vm)->ConnectAgent(10s);
    if (!agent.ok()) {
      std::fprintf(stderr, "restored agent: %s\n%s\n", agent.status().ToString().c_str(),
                   (*vm)->VmmLog().c_str());
      return false;
    }
    out->push_back(MillisSince(start));
  }
  // Warm pool: processes started and waiting (untimed), then restore request
  // to agent answering (timed).
  for (int run = 0; run < runs; ++run) {
    VmProcessOptions po = o;
    po.pool = true;
    po.cid = 1000 + run;
    auto vm = VmProcess::Start(po);
    if (!vm.ok() || !(*vm)->WaitForControl(20s).ok())
      return std::fprintf(stderr, "pool process did not come up\n"), false;
    auto start = Clock::now();
    auto r = (*vm)->control().Restore({.snapshot = snap}, kControlTimeout);
    if (!r.ok()) {
      std::fprintf(stderr, "pool restore failed: %s\n%s\n", r.status().ToString().c_str(),
                   (*vm)->VmmLog().c_str());
      return false;
    }
    auto agent = (*vm)->ConnectAgent(10s);
    if (!agent.ok()) return std::fprintf(stderr, "pool agent: %s\n", (*vm)->VmmLog().c_str()), false;
    warm->push_back(MillisSince(start));
  }
  // Snapshot files are read-only; the scratch dir's removal needs them writable.
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator(snap, ec))
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add, ec);
  return true;
}

// Forks a running guest into n children (one request); returns the time
// from the request to every child's agent answering, in ms (negative: error).
// The children are killed on return unless `keep` takes them.
double TimeFork(VmProcess& parent, int n, uint64_t first_cid,
                std::vector<std::unique_ptr<VmProcess>>* keep = nullptr,
                std::vector<double>* parent_ms = nullptr) {
  ForkRequest request;
  std::vector<std::string> dirs;
  for (int i = 0; i < n; ++i) {
    char tmpl[] = "/tmp/kubicle-bench-fork-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return -1;
    dirs.push_back(tmpl);
    // No serial: a child's console is discarded.
    request.children.push_back(ForkChild{.control = dirs.back() + "/control.sock",
                                         .cid = first_cid + i,
                                         .vsock_uds = dirs.back() + "/vsock.sock"});
  }
  auto start = Clock::now();
  auto r = parent.control().Fork(request, kControlTimeout);
  if (!r.ok()) {
    std::fprintf(stderr, "fork failed: %s\n", r.status().ToString().c_str());
    for (auto& d : dirs) std::filesystem::remove_all(d);
    return -1;
  }
  if (parent_ms) parent_ms->push_back(static_cast<double>(r->fork_us) / 1000.0);
  std::vector<std::unique_ptr<VmProcess>> kids;
  for (int i = 0; i < n; ++i) {
    kids.push_back(VmProcess::Attach(static_cast<pid_t>(r->pids[i]), dirs[i]));
  }
  // Every child is asked at once, as a node daemon would.
  std::atomic<int> failed{0};
  std::vector<std::thread> askers;
  for (auto& kid : kids) {
    askers.emplace_back([&failed, k = kid.get()] {
      if (!k->ConnectAgent(10s).ok()) failed++;
    });
  }
  for (auto& t : askers) t.join();
  if (failed > 0) return std::fprintf(stderr, "%d fork children did not answer\n", failed.load()), -1;
  double ms = MillisSince(start);
  if (keep) *keep = std::move(kids);
  return ms;
}

// Fork figures at one guest memory size.
bool MeasureForkAt(const VmProcessOptions& base, const std::string& mem, int runs) {
  VmProcessOptions o = base;
  o.mem = mem;
  auto parent = VmProcess::Start(o);
  if (!parent.ok()) return std::fprintf(stderr, "start: %s\n", parent.status().ToString().c_str()), false;
  auto agent = (*parent)->ConnectAgent(60s);
  if (!agent.ok() || !(*agent)->MemFill(1, 32ull << 20).ok())
    return std::fprintf(stderr, "fork parent (%s) did not come up\n", mem.c_str()), false;
  std::vector<double> fork_ms, parent_ms;
  std::vector<std::unique_ptr<VmProcess>> last;
  for (int run = 0; run < runs; ++run) {
    double ms = TimeFork(**parent, 1, 5000 + run, &last, &parent_ms);
    if (ms < 0) return false;
    fork_ms.push_back(ms);
    if (run + 1 < runs) last.clear();
  }
  std::this_thread::sleep_for(200ms);  // let the last child go idle
  PrivateMemory child;
  auto status = last.at(0)->control().GetStatus(kControlTimeout);
  if (status.ok()) child = MeasurePrivate(last[0]->pid(), status->guest_memory);
  last.clear();
  std::string title = "fork to child answering, " + mem;
  kubicle::bench::PrintPercentiles(title, fork_ms, "ms");
  kubicle::bench::PrintPercentiles("  parent: pause, capture, fork(2), resume", parent_ms, "ms");
  const std::string log = (*parent)->VmmLog();
  for (const char* key : {"kvm_vm_us", "slots_us", "devices_us", "vcpus_us", "total_us"}) {
    std::vector<double> v = LogField(log, "fork child running", key);
    std::string name = "  child step " + std::string(key, std::strlen(key) - 3);
    if (!v.empty()) kubicle::bench::PrintPercentiles(name, v, "ms");
  }
  std::printf("%-44s %9.2f MiB (guest pages copied: %.2f MiB)\n", "  private memory of one idle fork child",
              (child.vmm_kib + child.guest_kib) / 1024.0, child.guest_kib / 1024.0);
  return true;
}

// Fork of a guest with a 64 MiB copy-on-write disk (--layer-dir): the
// parent freezes its overlay, every child opens the chain with its own.
bool MeasureForkWithDisk(const VmProcessOptions& base, int runs) {
  char tmpl[] = "/tmp/kubicle-bench-disk-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return false;
  const std::string dir = tmpl;
  std::filesystem::create_directory(dir + "/layers");
  {
    std::ofstream img(dir + "/base.img", std::ios::binary);
    img.seekp((64 << 20) - 1);
    img.put(0);
  }
  bool ok = false;
  {
    VmProcessOptions o = base;
    o.disks = {dir + "/base.img"};
    o.extra_args.insert(o.extra_args.end(), {"--layer-dir", dir + "/layers"});
    auto parent = VmProcess::Start(o);
    auto agent = parent.ok() ? (*parent)->ConnectAgent(60s) : Result<std::unique_ptr<AgentClient>>(parent.status());
    std::vector<double> fork_ms, parent_ms;
    for (int run = 0; agent.ok() && run < runs; ++run) {
      // Something to freeze each time: one written sector.
      if (!(*agent)->DiskWrite(0, run, kubicle::guest::protocol::Bytes(512, uint8_t(run))).ok()) break;
      double ms = TimeFork(**parent, 1, 7000 + run, nullptr, &parent_ms);
      if (ms < 0) break;
      fork_ms.push_back(ms);
    }
    ok = fork_ms.size() == static_cast<size_t>(runs);
    if (ok) {
      kubicle::bench::PrintPercentiles("fork to child answering, 64 MiB CoW disk", fork_ms, "ms");
      kubicle::bench::PrintPercentiles("  parent: pause, freeze, capture, fork(2)", parent_ms, "ms");
    } else {
      std::fprintf(stderr, "fork with a disk failed\n");
    }
  }
  std::error_code ec;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir, ec))
    std::filesystem::permissions(e.path(), std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add, ec);
  std::filesystem::remove_all(dir, ec);
  return ok;
}

// Shutdown request to the process gone (reaped), the path a node daemon
// waits on when it stops a sandbox.
bool MeasureShutdown(const VmProcessOptions& o, int runs) {
  std::vector<double> reply_ms, exit_ms;
  for (int run = 0; run < runs; ++run) {
    auto vm = VmProcess::Start(o);
    if (!vm.ok() || !(*vm)->ConnectAgent(60s).ok()) return std::fprintf(stderr, "start failed\n"), false;
    auto start = Clock::now();
    const kubicle::Status reply = (*vm)->control().Shutdown(kControlTimeout);
    reply_ms.push_back(MillisSince(start));
    auto code = (*vm)->Wait(10s);
    if (!code.ok() || *code != 0) {
      std::fprintf(stderr, "shutdown did not exit 0 (reply: %s)\n", reply.ToString().c_str());
      return false;
    }
    exit_ms.push_back(MillisSince(start));
  }
  kubicle::bench::PrintPercentiles("shutdown reply, " + o.mem, reply_ms, "ms");
  kubicle::bench::PrintPercentiles("shutdown to process reaped, " + o.mem, exit_ms, "ms");
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20, pings = 1000;
  std::string fork_sizes = "128M,512M,2G";
  std::string only;  // "fork-sizes" or "shutdown": just that part
  std::string seccomp = "enforce";  // kubicle-vmm --seccomp: compare with off
  const std::vector<std::string> args = kubicle::SplitFlagValues(argc, argv);  // --flag V or --flag=V
  for (size_t i = 0; i + 1 < args.size(); i += 2) {
    if (args[i] == "--runs") runs = std::atoi(args[i + 1].c_str());
    if (args[i] == "--pings") pings = std::atoi(args[i + 1].c_str());
    if (args[i] == "--fork-sizes") fork_sizes = args[i + 1];
    if (args[i] == "--only") only = args[i + 1];
    if (args[i] == "--seccomp") seccomp = args[i + 1];
  }
  VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = KUBICLE_TESTGUEST_ELF;
  o.extra_args = {"--seccomp", seccomp};  // every VMM here, and so its fork children
  std::printf("kubicle-vmm with the test guest, %s memory, %d run(s), seccomp %s\n", o.mem.c_str(), runs,
              seccomp.c_str());
  if (only == "shutdown") return MeasureShutdown(o, runs) ? 0 : 1;
  if (only == "fork-disk") return MeasureForkWithDisk(o, runs) ? 0 : 1;
  if (only == "net") return kubicle::bench::MeasureNet(o, runs) ? 0 : 1;
  if (only == "fork20") {  // one 20-way fork, with the children's start-up steps
    auto parent = VmProcess::Start(o);
    if (!parent.ok() || !(*parent)->ConnectAgent(60s).ok()) return 1;
    std::vector<double> parent_ms;
    std::vector<std::unique_ptr<VmProcess>> kids;
    double ms = TimeFork(**parent, 20, 3000, &kids, &parent_ms);
    if (ms < 0) return 1;
    std::printf("%-44s %9.2f ms (parent %.2f ms)\n", "20-way fork until all children answer", ms,
                parent_ms.at(0));
    const std::string log = (*parent)->VmmLog();
    for (const char* key : {"kvm_vm_us", "slots_us", "devices_us", "vcpus_us", "total_us"}) {
      std::vector<double> v = LogField(log, "fork child running", key);
      std::string name = "  child step " + std::string(key, std::strlen(key) - 3);
      if (!v.empty()) kubicle::bench::PrintPercentiles(name, v, "ms");
    }
    return 0;
  }
  if (only == "fork-sizes") {
    std::istringstream sizes(fork_sizes);
    for (std::string mem; std::getline(sizes, mem, ',');)
      if (!mem.empty() && !MeasureForkAt(o, mem, runs)) return 1;
    return 0;
  }

  std::vector<double> boot_ms, ping_us;
  PrivateMemory idle;
  for (int run = 0; run < runs; ++run) {
    auto start = Clock::now();
    auto vm = VmProcess::Start(o);
    if (!vm.ok()) return std::fprintf(stderr, "start: %s\n", vm.status().ToString().c_str()), 1;
    auto agent = (*vm)->ConnectAgent(60s);
    if (!agent.ok()) {
      std::fprintf(stderr, "agent: %s\n%s\n", agent.status().ToString().c_str(),
                   (*vm)->SerialOutput().c_str());
      return 1;
    }
    boot_ms.push_back(MillisSince(start));
    if (run == 0) {
      for (int i = 0; i < pings; ++i) {
        auto t = Clock::now();
        if (!(*agent)->Ping().ok()) return std::fprintf(stderr, "ping failed\n"), 1;
        ping_us.push_back(MillisSince(t) * 1000);
      }
      std::this_thread::sleep_for(200ms);  // let it go idle
      auto status = (*vm)->control().GetStatus(kControlTimeout);
      if (status.ok()) idle = MeasurePrivate((*vm)->pid(), status->guest_memory);
    }
  }
  std::vector<double> restore_ms, warm_ms;
  if (!MeasureRestore(o, runs, &restore_ms, &warm_ms)) return 1;
  std::vector<double> fork_ms;
  double fork20_ms = -1;
  {
    auto parent = VmProcess::Start(o);
    if (!parent.ok() || !(*parent)->ConnectAgent(60s).ok())
      return std::fprintf(stderr, "fork parent did not boot\n"), 1;
    for (int run = 0; run < runs; ++run) {
      double ms = TimeFork(**parent, 1, 2000 + run);
      if (ms < 0) return 1;
      fork_ms.push_back(ms);
    }
    fork20_ms = TimeFork(**parent, 20, 3000);
    if (fork20_ms < 0) return 1;
  }
  kubicle::bench::PrintPercentiles("cold boot to agent answering", boot_ms, "ms");
  kubicle::bench::PrintPercentiles("restore (new process) to agent answering", restore_ms, "ms");
  kubicle::bench::PrintPercentiles("warm-pool restore to agent answering", warm_ms, "ms");
  std::printf("  (restore targets: p50 5 ms, p99 15 ms)\n");
  kubicle::bench::PrintPercentiles("fork to child agent answering", fork_ms, "ms");
  std::printf("%-44s %9.2f ms (target 50 ms; fork p50 target 10 ms)\n",
              "20-way fork until all children answer", fork20_ms);
  kubicle::bench::PrintPercentiles("vsock ping round trip", ping_us, "us");
  std::printf("%-44s %9.2f MiB (guest-touched pages: %.2f MiB, target <= 3 MiB)\n",
              "idle kubicle-vmm private memory", idle.vmm_kib / 1024.0, idle.guest_kib / 1024.0);
  std::istringstream sizes(fork_sizes);
  for (std::string mem; std::getline(sizes, mem, ',');) {
    if (!mem.empty() && !MeasureForkAt(o, mem, runs)) return 1;
  }
  if (!MeasureForkWithDisk(o, runs)) return 1;
  if (!MeasureShutdown(o, std::max(3, runs / 2))) return 1;
  return 0;
}
