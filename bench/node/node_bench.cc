// kubicle-bench-node: figures for kubicle-node through its HTTP API. Starts a
// kubicle-node on a scratch state directory with the test-guest template and
// prints: create-to-ready p50/p99, 20-way fan-out wall time, exec round trip
// p50, sustained create/exec/delete cycles per second, and host memory per
// idle sandbox (PSS and private of the kubicle-vmm processes) with how many
// idle sandboxes 24 GiB would hold. Prints figures; never asserts on timing.
//
//   kubicle-bench-node [--samples N] [--hold N] [--cycle-seconds S] [--workers N]
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/node/bench_node.h"
#include "bench/stats.h"
#include "common/flag_args.h"
#include "noderuntime/client/node_client.h"

namespace kubicle::bench {
namespace {

using noderuntime::client::json;
using noderuntime::client::NodeClient;
using namespace std::chrono_literals;

struct Options {
  int samples = 100;
  int hold = 100;
  int cycle_seconds = 10;
  int workers = 4;
};

void CreateLatency(NodeClient& c, const Options& o) {
  std::vector<double> api, ready;
  for (int i = 0; i < o.samples; ++i) {
    auto t0 = Clock::now();
    json s = CreateSandbox(c, "lat");
    api.push_back(MillisSince(t0));
    ready.push_back(s["readyMs"].get<double>());
    auto d = c.Call("DELETE", "/v1/sandboxes/" + s["id"].get<std::string>());
    if (!d.ok()) Die("delete", d.status());
  }
  PrintPercentiles("API create to ready (HTTP round trip)", api, "ms");
  PrintPercentiles("  of which node restore to agent answering", ready, "ms");
}

void FanOut(NodeClient& c) {
  std::vector<double> walls;
  for (int round = 0; round < 5; ++round) {
    const std::string run = "fan" + std::to_string(round);
    auto t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < 20; ++i) threads.emplace_back([&] { CreateSandbox(c, run); });
    for (auto& t : threads) t.join();
    walls.push_back(MillisSince(t0));
    SweepRun(c, run);
  }
  PrintPercentiles("20-way fan-out wall time (20 parallel creates)", walls, "ms");
}

void ExecRoundTrip(NodeClient& c, const Options& o) {
  json s = CreateSandbox(c, "exec");
  const std::string path = "/v1/sandboxes/" + s["id"].get<std::string>() + "/exec";
  std::vector<double> ms;
  for (int i = 0; i < o.samples * 2; ++i) {
    auto t0 = Clock::now();
    auto r = c.Call("POST", path, {{"argv", {"echo", "x"}}});
    ms.push_back(MillisSince(t0));
    if (!r.ok() || (*r)["stdout"] != "x\n") Die("exec", r.ok() ? Status::Internal(r->dump()) : r.status());
  }
  PrintPercentiles("exec round trip through the API (echo x)", ms, "ms");
  SweepRun(c, "exec");
}

void Cycles(NodeClient& c, const Options& o) {
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < o.workers; ++w) {
    workers.emplace_back([&] {
      while (!stop) {
        json s = CreateSandbox(c, "cycle");
        const std::string id = s["id"];
        auto r = c.Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", {"echo", "x"}}});
        if (!r.ok()) Die("cycle exec", r.status());
        auto d = c.Call("DELETE", "/v1/sandboxes/" + id);
        if (!d.ok()) Die("cycle delete", d.status());
        ++done;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::seconds(o.cycle_seconds));
  stop = true;
  for (auto& t : workers) t.join();
  double secs = MillisSince(t0) / 1000;
  std::printf("%-44s %9.1f /s   (%d cycles, %d workers, %.1f s)\n",
              "sustained create/exec/delete cycles", done / secs, done.load(), o.workers, secs);
}

// PSS and private memory of one process, from smaps_rollup (KiB).
std::pair<uint64_t, uint64_t> PssPrivate(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  uint64_t pss = 0, priv = 0;
  while (std::getline(f, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "Pss: %llu kB", &kib) == 1) pss += kib;
    if (std::sscanf(line.c_str(), "Private_Clean: %llu kB", &kib) == 1 ||
        std::sscanf(line.c_str(), "Private_Dirty: %llu kB", &kib) == 1) {
      priv += kib;
    }
  }
  return {pss, priv};
}

// MemAvailable from /proc/meminfo (KiB): counts kernel memory (page tables,
// KVM state) that PSS does not, but also everything else on the machine.
uint64_t MemAvailableKib() {
  std::ifstream f("/proc/meminfo");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kib) == 1) return kib;
  }
  return 0;
}

void IdleMemory(NodeClient& c, const Options& o) {
  const uint64_t avail_before = MemAvailableKib();
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  auto t0 = Clock::now();
  for (int w = 0; w < 8; ++w) {
    threads.emplace_back([&] {
      while (next.fetch_add(1) < o.hold) CreateSandbox(c, "hold");
    });
  }
  for (auto& t : threads) t.join();
  double create_s = MillisSince(t0) / 1000;
  std::this_thread::sleep_for(1s);  // let them go idle
  auto list = c.Call("GET", "/v1/sandboxes?labelSelector=kubicle.dev%2Frun%3Dhold");
  if (!list.ok()) Die("list", list.status());
  uint64_t pss = 0, priv = 0;
  size_t n = 0;
  for (const auto& s : (*list)["items"]) {
    auto [p, v] = PssPrivate(s["vmmPid"].get<int>());
    if (p == 0) continue;
    pss += p;
    priv += v;
    ++n;
  }
  if (n == 0) Die("memory", Status::Internal("no VMM process readable"));
  double pss_mib = pss / 1024.0 / n, priv_mib = priv / 1024.0 / n;
  const uint64_t avail_after = MemAvailableKib();
  double avail_mib = avail_before > avail_after ? (avail_before - avail_after) / 1024.0 / n : 0;
  std::printf("idle sandboxes held: %zu (created in %.1f s)\n", n, create_s);
  std::printf("%-44s PSS %.2f MiB, private %.2f MiB\n", "host memory per idle sandbox (kubicle-vmm)",
              pss_mib, priv_mib);
  std::printf("%-44s %.2f MiB (MemAvailable drop / held; includes kernel memory, noisy)\n",
              "  host memory per idle sandbox, whole host", avail_mib);
  std::printf("%-44s %.0f by PSS, %.0f by MemAvailable drop (EXTRAPOLATED from %zu held)\n",
              "idle sandboxes in 24 GiB", 24 * 1024 / pss_mib,
              avail_mib > 0 ? 24 * 1024 / avail_mib : 0.0, n);
  SweepRun(c, "hold");
}

int Main(int argc, char** argv) {
  SetProgramName("kubicle-bench-node");
  Options o;
  const std::vector<std::string> args = SplitFlagValues(argc, argv);  // --flag N or --flag=N
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";  // no value: usage
    const int v = flag.empty() ? 0 : std::atoi(args[i + 1].c_str());
    if (flag == "--samples") o.samples = std::max(1, v);
    else if (flag == "--hold") o.hold = std::max(1, v);
    else if (flag == "--cycle-seconds") o.cycle_seconds = std::max(1, v);
    else if (flag == "--workers") o.workers = std::max(1, v);
    else {
      std::fprintf(stderr, "usage: kubicle-bench-node [--samples N] [--hold N] [--cycle-seconds S] [--workers N]\n");
      return 2;
    }
  }
  auto node = BenchNode::Start({.pool_size = 4});
  auto c = node->NewClient();
  std::printf("kubicle-node %s, state %s, no cgroups, warm pool 4 per shape\n", node->url().c_str(),
              node->dir().c_str());
  std::printf("template tg (test guest, 64 MiB): baked in %.2f s\n", node->BakeTestGuest("tg", 64));
  CreateLatency(*c, o);
  FanOut(*c);
  ExecRoundTrip(*c, o);
  Cycles(*c, o);
  IdleMemory(*c, o);
  node->Stop();
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
