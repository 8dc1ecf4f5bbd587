// kubicle-bench-vmm: figures for kubicle-vmm with the tiny test guest on this
// machine's KVM. Prints cold boot to agent answering (p50/p99), vsock ping
// round trip (p50/p99), and the private memory of one idle kubicle-vmm beyond
// guest-touched pages, and restore of a snapshot into a new kubicle-vmm
// process (`kubicle-vmm restore`, cold: process start and KVM setup
// included) and into a warm-pool process (`kubicle-vmm pool`, restore
// request to agent answering), p50/p99; fork of a running guest to the
// child's agent answering (p50/p99) and a 20-way fork until all answer.
//
//   build/bench/vmm/kubicle-bench-vmm [--runs N] [--pings N]
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bench/stats.h"
#include "vmm/testing/vm_process.h"

namespace {

using namespace std::chrono_literals;
using kubicle::bench::Clock;
using kubicle::bench::MillisSince;
using kubicle::vmm::testing::VmProcess;
using kubicle::vmm::testing::VmProcessOptions;

struct PrivateMemory {
  uint64_t vmm_kib = 0;    // private pages outside guest RAM
  uint64_t guest_kib = 0;  // private pages of guest RAM (what the guest touched)
};

// Sums Private_Clean + Private_Dirty per mapping from /proc/<pid>/smaps,
// splitting guest RAM (host ranges reported by the control socket) from the rest.
PrivateMemory MeasurePrivate(pid_t pid, const nlohmann::json& guest_ranges) {
  PrivateMemory m;
  std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
  std::string line;
  bool in_guest = false;
  while (std::getline(smaps, line)) {
    unsigned long long start = 0, end = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &start, &end) == 2 && line.find(':') > 8) {
      in_guest = false;
      for (const auto& r : guest_ranges) {
        uint64_t host = r["host"].get<uint64_t>();
        if (start >= host && end <= host + r["size"].get<uint64_t>()) in_guest = true;
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
  auto r = (*src)->Control({{"cmd", "snapshot"}, {"dir", snap}, {"resume", false}});
  if (!r.ok() || (*r)["ok"] != true) {
    std::fprintf(stderr, "snapshot failed: %s\n", r.ok() ? r->dump().c_str() : r.status().ToString().c_str());
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
    auto r = (*vm)->Control({{"cmd", "restore"}, {"snapshot", snap}});
    if (!r.ok() || (*r)["ok"] != true)
      return std::fprintf(stderr, "pool restore failed: %s\n", (*vm)->VmmLog().c_str()), false;
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
double TimeFork(VmProcess& parent, int n, uint64_t first_cid) {
  nlohmann::json children = nlohmann::json::array();
  std::vector<std::string> dirs;
  for (int i = 0; i < n; ++i) {
    char tmpl[] = "/tmp/kubicle-bench-fork-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return -1;
    dirs.push_back(tmpl);
    children.push_back({{"vsock_uds", dirs.back() + "/vsock.sock"},
                        {"control", dirs.back() + "/control.sock"},
                        {"serial", "none"}, {"cid", first_cid + i}});
  }
  auto start = Clock::now();
  auto r = parent.Control({{"cmd", "fork"}, {"count", n}, {"children", children}});
  if (!r.ok() || (*r)["ok"] != true) {
    std::fprintf(stderr, "fork failed: %s\n", r.ok() ? r->dump().c_str() : r.status().ToString().c_str());
    for (auto& d : dirs) std::filesystem::remove_all(d);
    return -1;
  }
  std::vector<std::unique_ptr<VmProcess>> kids;
  for (int i = 0; i < n; ++i) kids.push_back(VmProcess::Attach((*r)["pids"][i].get<pid_t>(), dirs[i]));
  for (auto& kid : kids)
    if (!kid->ConnectAgent(10s).ok()) return std::fprintf(stderr, "fork child did not answer\n"), -1;
  return MillisSince(start);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20, pings = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--pings")) pings = std::atoi(argv[i + 1]);
  }
  VmProcessOptions o;
  o.vmm_binary = KUBICLE_VMM_BIN;
  o.kernel = KUBICLE_TESTGUEST_ELF;
  std::printf("kubicle-vmm with the test guest, %s memory, %d run(s)\n", o.mem.c_str(), runs);

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
      auto status = (*vm)->Control({{"cmd", "status"}});
      if (status.ok()) idle = MeasurePrivate((*vm)->pid(), (*status)["guest_memory"]);
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
  return 0;
}
