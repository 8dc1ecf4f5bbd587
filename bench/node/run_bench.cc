// kubicle-bench-run: per-call run overhead (POST /v1/templates/{name}/run)
// against the ≤ 20 ms target. Starts a kubicle-node with the test-guest
// template and a warm pool of --pool-size VMs, then runs `true`:
// sequentially, and in bursts of --burst concurrent calls (the pool
// refills between bursts). Overhead = the call's wall time at the client
// minus the command's own time, taken as the p50 exec round trip of `true`
// in a running sandbox (what the command costs without a VM of its own).
// Then the same sequential runs with a 64 MiB workspace attached
// (docs/workspaces.md): the run also plugs the image into the VM and, before
// answering, stops the VM, syncs the image and releases the workspace.
// Prints figures; never asserts on timing.
//
//   kubicle-bench-run [--samples N] [--bursts N] [--burst N] [--pool-size N]
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "common/flag_args.h"
#include "noderuntime/client/node_client.h"
#include "noderuntime/daemon/daemon_process.h"
#include "noderuntime/network/host_share.h"

namespace kubicle::bench {
namespace {

using noderuntime::client::json;
using noderuntime::client::NodeClient;
using namespace std::chrono_literals;

struct Options {
  int samples = 200;
  int bursts = 20;
  int burst = 10;
  int pool_size = 10;
};

[[noreturn]] void Die(const std::string& what, const Status& st) {
  std::fprintf(stderr, "kubicle-bench-run: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

void Bake(NodeClient& c) {
  auto put = c.Call("PUT", "/v1/templates/tg", {{"kernel", KUBICLE_TESTGUEST_ELF}, {"memMib", 64}});
  if (!put.ok()) Die("template put", put.status());
  for (int i = 0; i < 1200; ++i) {
    auto t = c.Call("GET", "/v1/templates/tg");
    if (!t.ok()) Die("template get", t.status());
    if ((*t)["state"] == "Ready") return;
    if ((*t)["state"] == "Failed") Die("bake", Status::Internal((*t)["message"]));
    std::this_thread::sleep_for(50ms);
  }
  Die("bake", Status::DeadlineExceeded("not ready in 60 s"));
}

// The command's own cost: `true` through the agent of a running sandbox.
double CommandItself(NodeClient& c, int samples) {
  auto s = c.Call("POST", "/v1/sandboxes", {{"template", "tg"}});
  if (!s.ok()) Die("create", s.status());
  const std::string id = (*s)["id"];
  std::vector<double> ms;
  for (int i = 0; i < samples; ++i) {
    auto t0 = Clock::now();
    auto r = c.Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", {"true"}}});
    if (!r.ok()) Die("exec", r.status());
    ms.push_back(MillisSince(t0));
  }
  (void)c.Call("DELETE", "/v1/sandboxes/" + id);
  PrintPercentiles("exec `true` in a running sandbox (the command)", ms, "ms");
  return Percentile(ms, 50);
}

struct Sample {
  double wall_ms = 0, restore_ms = 0;
};

Sample RunTrue(NodeClient& c, const std::string& workspace = "") {
  auto t0 = Clock::now();
  json body = {{"argv", {"true"}}};
  if (!workspace.empty()) body["workspace"] = workspace;
  auto r = c.Call("POST", "/v1/templates/tg/run", body);
  Sample s{MillisSince(t0), 0};
  if (!r.ok()) Die("run", r.status());
  if ((*r)["exitCode"] != 0) Die("run", Status::Internal("true exited " + (*r)["exitCode"].dump()));
  s.restore_ms = (*r)["timings"]["restoreMs"].get<double>();
  return s;
}

void Report(const std::string& what, const std::vector<Sample>& samples, double command_ms) {
  std::vector<double> overhead, restore;
  for (const Sample& s : samples) {
    overhead.push_back(s.wall_ms - command_ms);
    restore.push_back(s.restore_ms);
  }
  PrintPercentiles(what + ": overhead", overhead, "ms");
  PrintPercentiles(what + ": of which restore (node)", restore, "ms");
  std::printf("%-44s %s (p50 %.2f ms vs <= 20 ms)\n", (what + ": target").c_str(),
              Percentile(overhead, 50) <= 20 ? "MET" : "MISSED", Percentile(overhead, 50));
}

// Waits for the node's warm pool to refill (idle VMs, from its metrics).
void WaitPool(NodeClient& c, int want) {
  for (int i = 0; i < 400; ++i) {
    auto m = c.GetRaw("/metrics");
    if (m.ok()) {
      size_t at = m->find("\nkubicle_pool_vms ");
      if (at != std::string::npos && std::atoi(m->c_str() + at + 18) >= want) return;
    }
    std::this_thread::sleep_for(10ms);
  }
}

int Main(int argc, char** argv) {
  Options o;
  const std::vector<std::string> args = SplitFlagValues(argc, argv);
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";
    const int v = flag.empty() ? 0 : std::atoi(args[i + 1].c_str());
    if (flag == "--samples") o.samples = std::max(1, v);
    else if (flag == "--bursts") o.bursts = std::max(1, v);
    else if (flag == "--burst") o.burst = std::max(1, v);
    else if (flag == "--pool-size") o.pool_size = std::max(0, v);
    else {
      std::fprintf(stderr, "usage: kubicle-bench-run [--samples N] [--bursts N] [--burst N] [--pool-size N]\n");
      return 2;
    }
  }
  char tmpl[] = "/tmp/kubicle-bench-run-XXXXXX";
  if (!::mkdtemp(tmpl)) Die("mkdtemp", Status::FromErrno("mkdtemp"));
  const std::string dir = tmpl;
  std::vector<std::string> node_args = {"--state-dir", dir + "/state", "--vmm", KUBICLE_VMM_BIN, "--listen",
                                   "127.0.0.1:0", "--capacity-mem", "1T", "--capacity-vcpus", "100000",
                                   "--pool-size", std::to_string(o.pool_size), "--no-cgroups"};
  // The sandbox network is on, as by default, on a CIDR of its own.
  static std::optional<noderuntime::network::SandboxCidrLease> cidr;
  auto net = noderuntime::network::SharedHostNetworkFlags(&cidr);
  if (!net.ok()) Die("sandbox CIDR", net.status());
  node_args.insert(node_args.end(), net->begin(), net->end());
  auto d = noderuntime::daemon::DaemonProcess::Start(KUBICLE_NODE_BIN, node_args, dir + "/daemon.log", 30s);
  if (!d.ok()) Die("starting kubicle-node (log in " + dir + "/daemon.log)", d.status());
  std::ifstream tf(dir + "/state/admin-token");
  std::string token;
  tf >> token;
  auto c = NodeClient::Create((*d)->url(), token);
  if (!c.ok()) Die("client", c.status());
  std::printf("kubicle-node %s, no cgroups, warm pool %d per shape, test guest 64 MiB\n",
              (*d)->url().c_str(), o.pool_size);
  Bake(**c);
  const double command_ms = CommandItself(**c, 100);
  for (int i = 0; i < 10; ++i) RunTrue(**c);  // first-use allocations
  std::vector<Sample> seq;
  for (int i = 0; i < o.samples; ++i) {
    WaitPool(**c, o.pool_size);  // each call meets a warm pool, as a steady trickle would
    seq.push_back(RunTrue(**c));
  }
  Report("run `true`, sequential", seq, command_ms);
  auto ws = (*c)->Call("PUT", "/v1/workspaces/bench", {{"sizeMiB", 64}});
  if (!ws.ok()) Die("workspace", ws.status());
  std::vector<Sample> seq_ws;
  for (int i = 0; i < o.samples; ++i) {
    WaitPool(**c, o.pool_size);
    seq_ws.push_back(RunTrue(**c, "bench"));
  }
  Report("run `true` with a workspace, sequential", seq_ws, command_ms);
  std::vector<Sample> burst;
  std::vector<double> burst_wall;
  for (int b = 0; b < o.bursts; ++b) {
    WaitPool(**c, o.pool_size);
    std::vector<Sample> got(o.burst);
    std::vector<std::thread> threads;
    auto t0 = Clock::now();
    for (int i = 0; i < o.burst; ++i) {
      threads.emplace_back([&, i] {
        auto ci = NodeClient::Create((*d)->url(), token);
        if (!ci.ok()) Die("client", ci.status());
        got[i] = RunTrue(**ci);
      });
    }
    for (auto& t : threads) t.join();
    burst_wall.push_back(MillisSince(t0));
    burst.insert(burst.end(), got.begin(), got.end());
  }
  Report("run `true`, bursts of " + std::to_string(o.burst), burst, command_ms);
  PrintPercentiles("burst of " + std::to_string(o.burst) + ", all answered (wall)", burst_wall, "ms");
  (*d)->Signal(SIGTERM);
  auto rc = (*d)->Wait(30s);
  std::printf("kubicle-node stopped: %s\n", rc == std::optional<int>(0) ? "exit 0" : "not cleanly");
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
