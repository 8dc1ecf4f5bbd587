// kubicle-bench-cost: what 1,000 agent runs cost in VMs under three ways of
// giving agents compute, side by side on this node (issue 14):
//   held      a sandbox per agent, created at its start, deleted at its end;
//   pool      a runner borrowing a sandbox from a shared pool per tool call;
//   per-call  a per-call run per tool call (restore, run, discard).
// Each agent runs --turns turns of think time then one tool call (`echo`
// through the agent). Think time is a model's answer, ~3 s in published
// traces; here it is scaled down (--think-ms, 300 = 1/10) so a run takes
// seconds. Agents at a time (--concurrency) over think time is the rate of
// tool calls: 10 agents thinking 300 ms make ~33 calls a second, what two
// cores restore and tear down with room to spare. Scaling think time down
// further without fewer agents would measure a node overrun by a call rate
// no real swarm of that size makes (50 agents thinking 30 ms: ~1,600/s).
// --agents 1000 takes ~40 minutes at that rate (24,000 calls per model). Figures per 1,000 agent runs: VM-seconds (a VM holding guest RAM
// exists) and guest-memory GiB-seconds, plus the tool call's p50/p99 as the
// agent sees it. Prints figures; never asserts on timing.
//
//   kubicle-bench-cost [--agents N,N] [--turns N] [--think-ms MS]
//                      [--concurrency N] [--pool-sandboxes N] [--mem-mib N]
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/node/bench_node.h"
#include "bench/stats.h"
#include "common/flag_args.h"

namespace kubicle::bench {
namespace {

using noderuntime::client::json;
using noderuntime::client::NodeClient;

struct Options {
  std::vector<int> agents = {100};
  int turns = 24;
  int think_ms = 300;
  int concurrency = 10;
  int pool_sandboxes = 0;  // 0: concurrency / 5, at least 2
  uint64_t mem_mib = 64;
};

// What one model cost for one agent count.
struct Cost {
  std::string model;
  double wall_s = 0;
  double vm_seconds = 0;       // sum over VMs of the time each held guest RAM
  std::vector<double> call_ms; // each tool call as its agent saw it
  std::string note;
};

double SecondsSince(Clock::time_point t0) { return MillisSince(t0) / 1000; }

void Think(const Options& o) { std::this_thread::sleep_for(std::chrono::milliseconds(o.think_ms)); }

void Echo(NodeClient& c, const std::string& id) {
  auto r = c.Call("POST", "/v1/sandboxes/" + id + "/exec", {{"argv", {"echo", "tool"}}});
  if (!r.ok()) Die("exec in " + id, r.status());
  if ((*r)["stdout"] != "tool\n") Die("exec in " + id, Status::DataLoss(r->dump()));
}

std::string Create(NodeClient& c, const std::string& run) {
  auto r = c.Call("POST", "/v1/sandboxes", {{"template", "tg"}, {"labels", {{"kubicle.dev/run", run}}}});
  if (!r.ok()) Die("create", r.status());
  return (*r)["id"];
}

void Delete(NodeClient& c, const std::string& id) {
  auto r = c.Call("DELETE", "/v1/sandboxes/" + id);
  if (!r.ok()) Die("delete " + id, r.status());
}

// Runs `agents` agents on `concurrency` workers; `agent(client, samples)`
// runs one agent and returns the VM-seconds it held. Sums them.
template <typename AgentFn>
Cost RunAgents(const BenchNode& node, const Options& o, int agents, AgentFn agent) {
  Cost cost;
  std::atomic<int> next{0};
  std::mutex mu;
  std::vector<std::thread> workers;
  const auto t0 = Clock::now();
  for (int w = 0; w < std::min(o.concurrency, agents); ++w) {
    workers.emplace_back([&] {
      auto c = node.NewClient();
      std::vector<double> calls;
      double held = 0;
      while (next.fetch_add(1) < agents) held += agent(*c, calls);
      std::lock_guard lock(mu);
      cost.vm_seconds += held;
      cost.call_ms.insert(cost.call_ms.end(), calls.begin(), calls.end());
    });
  }
  for (auto& t : workers) t.join();
  cost.wall_s = SecondsSince(t0);
  return cost;
}

// (1) A sandbox per agent for its whole run.
Cost Held(const BenchNode& node, const Options& o, int agents) {
  Cost cost = RunAgents(node, o, agents, [&](NodeClient& c, std::vector<double>& calls) {
    const auto born = Clock::now();
    const std::string id = Create(c, "cost-held");
    for (int t = 0; t < o.turns; ++t) {
      Think(o);
      const auto c0 = Clock::now();
      Echo(c, id);
      calls.push_back(MillisSince(c0));
    }
    Delete(c, id);
    return SecondsSince(born);
  });
  cost.model = "sandbox per agent (held)";
  return cost;
}

// A fixed set of sandboxes lent one tool call at a time.
class SandboxPool {
 public:
  explicit SandboxPool(std::vector<std::string> ids) : idle_(ids.begin(), ids.end()) {}
  std::string Borrow() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !idle_.empty(); });
    std::string id = idle_.front();
    idle_.pop_front();
    return id;
  }
  void Return(std::string id) {
    std::lock_guard lock(mu_);
    idle_.push_back(std::move(id));
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> idle_;
};

// (2) A runner's shared pool: VMs held for the whole run, whoever uses them.
// Its sandboxes outlive a call, so an agent's files do not follow it from
// call to call (that is what a workspace is for).
Cost Pool(const BenchNode& node, const Options& o, int agents) {
  const int size = o.pool_sandboxes > 0 ? o.pool_sandboxes : std::max(2, o.concurrency / 5);
  auto admin = node.NewClient();
  std::vector<std::string> ids;
  for (int i = 0; i < size; ++i) ids.push_back(Create(*admin, "cost-pool"));
  SandboxPool pool(ids);
  const auto opened = Clock::now();
  Cost cost = RunAgents(node, o, agents, [&](NodeClient& c, std::vector<double>& calls) {
    for (int t = 0; t < o.turns; ++t) {
      Think(o);
      const auto c0 = Clock::now();
      std::string id = pool.Borrow();
      Echo(c, id);
      pool.Return(std::move(id));
      calls.push_back(MillisSince(c0));
    }
    return 0.0;  // the pool's VMs are counted whole below
  });
  cost.vm_seconds = size * SecondsSince(opened);
  for (const std::string& id : ids) Delete(*admin, id);
  cost.model = "shared pool of " + std::to_string(size);
  return cost;
}

// (3) A per-call run per tool call: a VM exists from its restore until the
// answer (its teardown runs after, off the path, and is not counted).
Cost PerCall(const BenchNode& node, const Options& o, int agents) {
  Cost cost = RunAgents(node, o, agents, [&](NodeClient& c, std::vector<double>& calls) {
    double held = 0;
    for (int t = 0; t < o.turns; ++t) {
      Think(o);
      const auto c0 = Clock::now();
      auto r = c.Call("POST", "/v1/templates/tg/run", {{"argv", {"echo", "tool"}}});
      if (!r.ok()) Die("run", r.status());
      if ((*r)["stdout"] != "tool\n") Die("run", Status::DataLoss(r->dump()));
      calls.push_back(MillisSince(c0));
      held += (*r)["timings"]["totalMs"].get<double>() / 1000;
    }
    return held;
  });
  cost.model = "per-call run";
  cost.note = "+ the node's warm pool: VMM processes with no guest RAM";
  return cost;
}

void PrintTable(const Options& o, int agents, const std::vector<Cost>& costs) {
  std::printf("\n%d agents x %d turns, think %d ms (~3 s scaled 1/%d), %d at a time, %llu MiB guests\n",
              agents, o.turns, o.think_ms, std::max(1, 3000 / std::max(1, o.think_ms)),
              o.concurrency, static_cast<unsigned long long>(o.mem_mib));
  std::printf("%-26s %8s %16s %18s %11s %11s\n", "model", "wall s", "VM-s / 1k runs",
              "GiB-s / 1k runs", "call p50", "call p99");
  for (const Cost& c : costs) {
    const double per_1k = c.vm_seconds * 1000.0 / agents;
    std::printf("%-26s %8.1f %16.1f %18.2f %8.2f ms %8.2f ms\n", c.model.c_str(), c.wall_s, per_1k,
                per_1k * static_cast<double>(o.mem_mib) / 1024, Percentile(c.call_ms, 50),
                Percentile(c.call_ms, 99));
  }
  for (const Cost& c : costs)
    if (!c.note.empty()) std::printf("  %s: %s\n", c.model.c_str(), c.note.c_str());
}

std::vector<int> ParseCounts(const std::string& text) {
  std::vector<int> counts;
  std::stringstream ss(text);
  for (std::string part; std::getline(ss, part, ',');) {
    const int n = std::atoi(part.c_str());
    if (n <= 0) Die("--agents", Status::InvalidArgument("want positive counts, got " + text));
    counts.push_back(n);
  }
  return counts;
}

int Main(int argc, char** argv) {
  SetProgramName("kubicle-bench-cost");
  Options o;
  const std::vector<std::string> args = SplitFlagValues(argc, argv);
  for (size_t i = 0; i < args.size(); i += 2) {
    const std::string flag = i + 1 < args.size() ? args[i] : "";
    const std::string value = flag.empty() ? "" : args[i + 1];
    const int v = std::atoi(value.c_str());
    if (flag == "--agents") o.agents = ParseCounts(value);
    else if (flag == "--turns") o.turns = std::max(1, v);
    else if (flag == "--think-ms") o.think_ms = std::max(0, v);
    else if (flag == "--concurrency") o.concurrency = std::max(1, v);
    else if (flag == "--pool-sandboxes") o.pool_sandboxes = std::max(1, v);
    else if (flag == "--mem-mib") o.mem_mib = static_cast<uint64_t>(std::max(16, v));
    else {
      std::fprintf(stderr, "usage: kubicle-bench-cost [--agents N,N] [--turns N] [--think-ms MS] "
                           "[--concurrency N] [--pool-sandboxes N] [--mem-mib N]\n");
      return 2;
    }
  }
  // The node's warm pool is sized for a burst of the agents' tool calls.
  auto node = BenchNode::Start({.pool_size = std::max(4, o.concurrency / 5)});
  std::printf("kubicle-node %s, no cgroups, test guest %llu MiB\n", node->url().c_str(),
              static_cast<unsigned long long>(o.mem_mib));
  node->BakeTestGuest("tg", o.mem_mib);
  for (int agents : o.agents) {
    std::vector<Cost> costs;
    costs.push_back(Held(*node, o, agents));
    costs.push_back(Pool(*node, o, agents));
    costs.push_back(PerCall(*node, o, agents));
    PrintTable(o, agents, costs);
  }
  std::printf("\nVM-seconds of `held` and `pool` grow with think time (x%d at real speed); "
              "`per-call` does not.\n", std::max(1, 3000 / std::max(1, o.think_ms)));
  node->Stop();
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) { return kubicle::bench::Main(argc, argv); }
