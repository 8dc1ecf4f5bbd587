// The Kubernetes path end to end, on the real control plane
// (e2e/control-plane/build.sh) with kubicle-operator and a real kubicle-node
// (the tiny test guest on this machine's KVM) as their own processes.
// Prints, from a watch the bench holds on the Sandboxes:
//   apply -> Ready of one Sandbox (p50/p99 over 30), all-Ready wall time
//   for 20 and 100 applied at once, a 20-way SandboxFork to all Ready,
//   and where the time of one Sandbox goes: apply -> placed (operator),
//   placed -> token published (operator), token -> VM Running reported
//   (node; restoreMillis is the VMM's part), Running -> Ready (operator).
// Beside each figure: what the apiserver spent on it (its CPU seconds and
// its write requests per Sandbox by resource, from its own /metrics before
// and after; apiserver_cost.h) and the operator's and node's CPU seconds.
// Sandboxes carry their client's own token hash (spec.tokenSha256, no
// Secret) and the fork its children's (spec.childTokenSha256), as the
// Python SDK creates them; --token-secret applies them without, so the
// operator mints each token into a Secret (kubectl apply's way, and every
// Sandbox's before spec.tokenSha256).
// Usage: kubicle-bench-kube [--single N] [--batches 20,100] [--token-secret]
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/kube/apiserver_cost.h"
#include "bench/stats.h"
#include "common/flag_args.h"
#include "common/log.h"
#include "common/sha256.h"
#include "e2e/harness/control_plane.h"
#include "kube/http_kube_client.h"
#include "kube/informer.h"
#include "noderuntime/network/host_share.h"

namespace kubicle::bench {
namespace {

using kube::Json;
using namespace std::chrono_literals;

constexpr char kNs[] = "bench";
constexpr char kNode[] = "bench-node";

// First moment the watch saw each milestone of each Sandbox.
struct Milestones {
  Clock::time_point placed, token, running, ready;
  double restore_ms = 0;
  bool done() const { return ready != Clock::time_point{}; }
};

class SandboxWatch {
 public:
  explicit SandboxWatch(kube::KubeClient* c) : informer_(c, kube::SandboxResource(), kNs) {
    informer_.AddHandler([this](kube::WatchEventType, const Json& s) { Observe(s); });
    informer_.Start();
    informer_.WaitForSync(30s);
  }
  ~SandboxWatch() { informer_.Stop(); }

  bool WaitReady(const std::vector<std::string>& names, std::chrono::seconds timeout) {
    std::unique_lock l(mu_);
    return cv_.wait_for(l, timeout, [&] {
      for (const auto& n : names)
        if (!seen_[n].done()) return false;
      return true;
    });
  }
  Milestones Get(const std::string& name) {
    std::lock_guard l(mu_);
    return seen_[name];
  }

 private:
  void Observe(const Json& s) {
    const auto now = Clock::now();
    const std::string name = s["metadata"].value("name", "");
    const Json status = s.value("status", Json::object());
    std::lock_guard l(mu_);
    Milestones& m = seen_[name];
    auto mark = [&](Clock::time_point& t, bool cond) {
      if (cond && t == Clock::time_point{}) t = now;
    };
    mark(m.placed, s["metadata"].value("labels", Json::object()).contains("kubicle.dev/node"));
    mark(m.token, status.contains("tokenSha256"));
    const Json vm = status.value("vm", Json::object());
    if (vm.value("state", "") == "Running") {
      mark(m.running, true);
      m.restore_ms = vm.value("restoreMillis", 0.0);
    }
    bool ready = false;
    for (const Json& c : status.value("conditions", Json::array()))
      ready = ready || (c.value("type", "") == "Ready" && c.value("status", "") == "True");
    mark(m.ready, ready);
    cv_.notify_all();
  }

  kube::Informer informer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Milestones> seen_;
};

bool g_token_secret = false;  // --token-secret

Json SandboxObj(const std::string& name) {
  Json s = {{"metadata", {{"name", name}, {"labels", {{"kubicle.dev/run", "bench"}}}}},
            {"spec", {{"templateRef", {{"name", "tg"}}}}}};
  // The bench never reaches the data plane: any token's hash will do.
  if (!g_token_secret) s["spec"]["tokenSha256"] = Sha256Hex("bench token of " + name);
  return s;
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Creates `names` from `threads` threads at once; returns the first create's start.
Clock::time_point CreateAll(kube::KubeClient* c, const std::vector<std::string>& names, int threads) {
  const auto start = Clock::now();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      for (size_t i = t; i < names.size(); i += threads) (void)c->Create(kube::SandboxResource(), kNs, SandboxObj(names[i]));
    });
  }
  for (auto& t : ts) t.join();
  return start;
}

void DeleteRun(kube::KubeClient* c, SandboxWatch* w) {
  (void)c->DeleteCollection(kube::SandboxForkResource(), kNs, "kubicle.dev/run=bench");
  (void)c->DeleteCollection(kube::SandboxResource(), kNs, "kubicle.dev/run=bench");
  // The token Secrets too: their deletes by the garbage collector would
  // otherwise land in the next phase's write count.
  for (int i = 0; i < 600; ++i) {
    kube::ListOptions o;
    o.label_selector = "kubicle.dev/run=bench";
    auto l = c->List(kube::SandboxResource(), kNs, o);
    auto secrets = c->List(kube::SecretResource(), kNs, o);
    if (l.ok() && (*l)["items"].empty() && secrets.ok() && (*secrets)["items"].empty()) return;
    std::this_thread::sleep_for(100ms);
  }
}

struct Env {
  std::unique_ptr<e2e::ControlPlane> cp;
  std::unique_ptr<kube::HttpKubeClient> client;
  e2e::ChildProcess op, node;
};

Status WriteImages(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  std::ifstream in(KUBICLE_TESTGUEST_BIN, std::ios::binary);
  std::ofstream out(dir + "/kubicle-testguest", std::ios::binary);
  out << in.rdbuf();
  std::ofstream rootfs(dir + "/rootfs.img", std::ios::binary);
  rootfs << std::string(1 << 20, '\0');
  if (!in || !out || !rootfs) return Status::Internal("cannot write the images into " + dir);
  return Status::Ok();
}

Result<Env> Start() {
  auto bin = e2e::FindControlPlaneBinDir();
  if (!bin) return Status::NotFound("control plane binaries missing: run e2e/control-plane/build.sh");
  Env env;
  e2e::ControlPlaneOptions opts;
  opts.bin_dir = *bin;
  opts.crd_dir = std::string(KUBICLE_SOURCE_DIR) + "/crds";
  ASSIGN_OR_RETURN(env.cp, e2e::ControlPlane::Start(opts));
  for (const char* ns : {kNs, "kubicle-node-lease"}) (void)env.cp->Kubectl({"create", "ns", ns});
  ASSIGN_OR_RETURN(auto rest, env.cp->RestConfig());
  ASSIGN_OR_RETURN(env.client, kube::HttpKubeClient::Create(rest));
  const std::string work = env.cp->work_dir();
  RETURN_IF_ERROR(WriteImages(work + "/images"));
  ASSIGN_OR_RETURN(env.op, e2e::ChildProcess::Spawn(
                               {KUBICLE_OPERATOR_BIN, "--kubeconfig=" + env.cp->kubeconfig_path(),
                                "--leader-elect=false", "--node-lease-namespace=kubicle-node-lease",
                                "--metrics-port=0", "--log-level=warn", "--workers=8"},
                               work + "/operator.log"));
  ASSIGN_OR_RETURN(int port, e2e::FreePort());
  std::vector<std::string> node_argv = {
      KUBICLE_NODE_BIN, "serve", "--node-name=" + std::string(kNode),
      "--kubeconfig=" + env.cp->kubeconfig_path(), "--vmm=" KUBICLE_VMM_BIN,
      "--state-dir=" + work + "/node", "--listen=127.0.0.1:" + std::to_string(port),
      "--image-root=" + work + "/images", "--pool-size=16",
      "--capacity-sandboxes=1000", "--capacity-vcpus=1000", "--stop-vms-on-exit",
      "--log-level=warn"};
  // The sandbox network is on, as by default, on a CIDR of its own.
  static std::optional<noderuntime::network::SandboxCidrLease> cidr;
  ASSIGN_OR_RETURN(std::vector<std::string> net, noderuntime::network::SharedHostNetworkFlags(&cidr));
  node_argv.insert(node_argv.end(), net.begin(), net.end());
  ASSIGN_OR_RETURN(env.node, e2e::ChildProcess::Spawn(node_argv, work + "/node.log"));
  Json tmpl = {{"metadata", {{"name", "tg"}}},
               {"spec", {{"kernel", work + "/images/kubicle-testguest"}, {"rootfs", work + "/images/rootfs.img"},
                         {"memoryMiB", 64}, {"vcpus", 1}}}};
  RETURN_IF_ERROR(env.client->Create(kube::SandboxTemplateResource(), kNs, tmpl).status());
  for (int i = 0; i < 600; ++i) {
    auto t = env.client->Get(kube::SandboxTemplateResource(), kNs, "tg");
    if (t.ok() && t->value("status", Json::object()).value("phase", "") == "Ready") return env;
    std::this_thread::sleep_for(100ms);
  }
  return Status::DeadlineExceeded("template never Ready; see " + work + "/node.log");
}

// p50 of each milestone of `names`, counted from t0: where a batch waits.
void PrintStages(SandboxWatch* w, const std::vector<std::string>& names, Clock::time_point t0) {
  std::vector<double> placed, token, running, ready;
  for (const auto& n : names) {
    Milestones m = w->Get(n);
    placed.push_back(Ms(t0, m.placed));
    token.push_back(Ms(t0, m.token));
    running.push_back(Ms(t0, m.running));
    ready.push_back(Ms(t0, m.ready));
  }
  std::printf("    since the first create, p50/p99 ms: placed %.0f/%.0f, token %.0f/%.0f, "
              "vm Running %.0f/%.0f, Ready %.0f/%.0f\n",
              Percentile(placed, 50), Percentile(placed, 99), Percentile(token, 50), Percentile(token, 99),
              Percentile(running, 50), Percentile(running, 99), Percentile(ready, 50), Percentile(ready, 99));
}

// The first figure of /proc/loadavg: how quiet the machine was.
std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "?" : one;
}

// user + system CPU seconds of process `pid` so far; 0 if unreadable.
double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = stat.rfind(')');  // the command name may hold spaces
  if (comm_end == std::string::npos) return 0;
  std::vector<std::string> f;
  size_t pos = comm_end + 2;
  while (pos < stat.size() && f.size() < 13) {
    size_t sp = stat.find(' ', pos);
    if (sp == std::string::npos) sp = stat.size();
    f.push_back(stat.substr(pos, sp - pos));
    pos = sp + 1;
  }
  if (f.size() < 13) return 0;  // fields 3..15: utime and stime are 14 and 15
  return static_cast<double>(std::atoll(f[11].c_str()) + std::atoll(f[12].c_str())) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// What one phase cost: the apiserver's CPU and writes (its /metrics, read
// through kubectl off the measured path), the operator's and the node's CPU.
class PhaseCost {
 public:
  explicit PhaseCost(Env* env) : env_(env) { before_ = Sample(); }
  // Waits `settle` first so writes that trail Ready (Events) are counted.
  void Print(int sandboxes, std::chrono::milliseconds settle = 1000ms) {
    std::this_thread::sleep_for(settle);
    auto after = Sample();
    if (!before_.api || !after.api) {
      std::printf("    (apiserver /metrics not readable)\n");
      return;
    }
    std::printf("    %s; CPU operator %.2f s, node %.2f s\n",
                FormatCost(Diff(*before_.api, *after.api), sandboxes).c_str(), after.op - before_.op,
                after.node - before_.node);
  }

 private:
  struct Snapshot {
    std::optional<ApiserverSample> api;
    double op = 0, node = 0;
  };
  Snapshot Sample() {
    Snapshot s;
    s.op = ProcessCpuSeconds(env_->op.pid());
    s.node = ProcessCpuSeconds(env_->node.pid());
    auto r = env_->cp->Kubectl({"get", "--raw", "/metrics"});
    if (r.ok() && r->exit_code == 0) {
      auto parsed = ParseApiserverMetrics(r->output);
      if (parsed.ok()) s.api = *parsed;
    }
    return s;
  }
  Env* env_;
  Snapshot before_;
};

int Run(int singles, const std::vector<int>& batches) {
  log::Init("kubicle-bench-kube", false, log::Level::kWarn);
  auto env = Start();
  if (!env.ok()) {
    std::printf("kube bench: %s\n", env.status().ToString().c_str());
    return env.status().code() == StatusCode::kNotFound ? 0 : 1;
  }
  kube::KubeClient* c = env->client.get();
  SandboxWatch watch(c);
  std::printf("Sandboxes %s; load average at the start %s\n",
              g_token_secret ? "without spec.tokenSha256 (a token Secret each)"
                             : "with their client's own spec.tokenSha256 (no Secret)",
              LoadAverage().c_str());
  int seq = 0;
  auto next = [&] { return "s" + std::to_string(seq++); };
  {  // warm-up: connections, caches, the pool
    std::vector<std::string> warm = {next(), next(), next()};
    CreateAll(c, warm, 3);
    watch.WaitReady(warm, 60s);
    DeleteRun(c, &watch);
  }
  std::vector<double> ready, placed, token, running, readied, restore;
  PhaseCost singles_cost(&*env);
  for (int i = 0; i < singles; ++i) {
    const std::string n = next();
    const auto t0 = CreateAll(c, {n}, 1);
    if (!watch.WaitReady({n}, 60s)) {
      std::printf("kube bench: %s never Ready\n", n.c_str());
      return 1;
    }
    Milestones m = watch.Get(n);
    ready.push_back(Ms(t0, m.ready));
    placed.push_back(Ms(t0, m.placed));
    token.push_back(Ms(m.placed, m.token));
    running.push_back(Ms(m.token, m.running));
    readied.push_back(Ms(m.running, m.ready));
    restore.push_back(m.restore_ms);
    (void)c->Delete(kube::SandboxResource(), kNs, n);
    std::this_thread::sleep_for(50ms);  // its teardown off the next one's path
  }
  DeleteRun(c, &watch);
  PrintPercentiles("apply -> Ready, one Sandbox", ready, "ms");
  std::printf("    over the %d singles, each deleted after Ready (teardown included):\n", singles);
  singles_cost.Print(singles, 0ms);
  {  // one more, alone: its writes from create to Ready (and its trailing Event)
    PhaseCost one(&*env);
    const std::string n = next();
    CreateAll(c, {n}, 1);
    if (!watch.WaitReady({n}, 60s)) return 1;
    std::printf("    one Sandbox, create -> Ready only:\n");
    one.Print(1);
    DeleteRun(c, &watch);
  }
  std::printf("where it goes (p50):\n");
  PrintPercentiles("  apply -> placed (operator)", placed, "ms");
  PrintPercentiles("  placed -> tokenSha256 published (operator)", token, "ms");
  PrintPercentiles("  token -> vm Running reported (node)", running, "ms");
  PrintPercentiles("    of which restore in the VMM (restoreMillis)", restore, "ms");
  PrintPercentiles("  vm Running -> Ready condition (operator)", readied, "ms");
  for (int n : batches) {
    std::vector<std::string> names;
    for (int i = 0; i < n; ++i) names.push_back(next());
    PhaseCost cost(&*env);
    const auto t0 = CreateAll(c, names, 8);
    if (!watch.WaitReady(names, 300s)) {
      std::printf("kube bench: not all %d Ready in 300 s\n", n);
      return 1;
    }
    Clock::time_point last = t0;
    std::vector<double> each;
    for (const auto& nm : names) {
      Milestones m = watch.Get(nm);
      last = std::max(last, m.ready);
      each.push_back(Ms(t0, m.ready));
    }
    std::printf("%-44s %9.1f ms   (per Sandbox p50 %.1f ms, p99 %.1f ms)\n",
                ("apply " + std::to_string(n) + " at once -> all Ready").c_str(), Ms(t0, last),
                Percentile(each, 50), Percentile(each, 99));
    PrintStages(&watch, names, t0);
    cost.Print(n);
    DeleteRun(c, &watch);
  }
  // 20-way fork of a running Sandbox.
  const std::string src = next();
  CreateAll(c, {src}, 1);
  if (!watch.WaitReady({src}, 60s)) return 1;
  Json fork = {{"metadata", {{"name", "f"}, {"labels", {{"kubicle.dev/run", "bench"}}}}},
               {"spec", {{"sourceRef", {{"name", src}}}, {"replicas", 20}}}};
  if (!g_token_secret) {  // as the SDK forks: each child's own token hash
    Json hashes = Json::array();
    for (int i = 0; i < 20; ++i)
      hashes.push_back(Sha256Hex("bench token of f-" + std::to_string(i)));
    fork["spec"]["childTokenSha256"] = hashes;
  }
  PhaseCost fork_cost(&*env);
  const auto f0 = Clock::now();
  if (!c->Create(kube::SandboxForkResource(), kNs, fork).ok()) return 1;
  std::vector<std::string> kids;
  for (int i = 0; i < 20; ++i) kids.push_back("f-" + std::to_string(i));
  if (!watch.WaitReady(kids, 120s)) {
    std::printf("kube bench: fork children not all Ready\n");
    return 1;
  }
  Clock::time_point last = f0;
  for (const auto& k : kids) last = std::max(last, watch.Get(k).ready);
  std::printf("%-44s %9.1f ms\n", "SandboxFork of 20 -> all children Ready", Ms(f0, last));
  PrintStages(&watch, kids, f0);
  fork_cost.Print(20);
  DeleteRun(c, &watch);
  std::printf("logs: %s (operator.log, node.log)\n", env->cp->work_dir().c_str());
  env->node.Stop(30s);
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) {
  int singles = 30;
  std::vector<int> batches = {20, 100};
  std::vector<std::string> args = kubicle::SplitFlagValues(argc, argv);  // --flag V or --flag=V
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--single" && i + 1 < args.size()) {
      singles = std::atoi(args[++i].c_str());
    } else if (args[i] == "--token-secret") {
      kubicle::bench::g_token_secret = true;
    } else if (args[i] == "--batches" && i + 1 < args.size()) {
      batches.clear();
      for (char* tok = std::strtok(args[++i].data(), ","); tok; tok = std::strtok(nullptr, ","))
        batches.push_back(std::atoi(tok));
    } else {
      std::fprintf(stderr,
                   "usage: kubicle-bench-kube [--single N] [--batches 20,100] [--token-secret]\n");
      return 1;
    }
  }
  return kubicle::bench::Run(singles, batches);
}
