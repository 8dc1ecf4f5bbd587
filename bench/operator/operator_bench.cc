// Operator benchmarks; prints comparable figures.
//  1. Reconcile throughput in memory (FakeKubeClient): N Sandboxes through
//     informers, queue and 4 workers to Scheduled with a token.
//  2. On the real control plane (e2e/control-plane/build.sh), with
//     kubicle-operator as its own process and the bench playing the node
//     daemon: apply-to-Scheduled latency for 1, 20 and 100 Sandboxes (time
//     from the first create to the last status.nodeName seen by a watch),
//     and the operator's reconcile rate over the run (from its /metrics).
// Usage: operator_bench [--memory-only]
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "bench/stats.h"
#include "common/log.h"
#include "e2e/harness/control_plane.h"
#include "operator/controller.h"
#include "kube/fake_kube_client.h"
#include "kube/http_kube_client.h"
#include "kube/informer.h"
#include "kube/time_format.h"

namespace kubicle::bench {
namespace {

using kube::Json;

Json SandboxObj(const std::string& name) {
  return Json{{"metadata", {{"name", name}, {"labels", {{"kubicle.dev/run", "bench"}}}}},
              {"spec", {{"templateRef", {{"name", "py"}}}}}};
}

// The node daemon's part: heartbeat with capacity and a baked template.
Status PlayNode(kube::KubeClient* c, const std::string& ns, const std::string& lease_ns,
                const std::string& node) {
  Json lease = {{"apiVersion", "coordination.k8s.io/v1"}, {"kind", "Lease"},
                {"metadata", {{"name", "kubicle-node-" + node}, {"namespace", lease_ns},
                              {"labels", {{"kubicle.dev/node", node}}},
                              {"annotations", {{"kubicle.dev/capacity-sandboxes", "100000"}}}}},
                {"spec", {{"holderIdentity", node}, {"leaseDurationSeconds", 3600},
                          {"renewTime", kube::FormatMicroTime(std::chrono::system_clock::now())}}}};
  kube::PatchOptions po;
  po.field_manager = "kubicle-node/" + node;
  po.force = true;
  RETURN_IF_ERROR(c->Patch(kube::LeaseResource(), lease_ns, "kubicle-node-" + node,
                           kube::PatchType::kApply, lease, "", po).status());
  Json tmpl = {{"metadata", {{"name", "py"}}}, {"spec", {{"kernel", "/k"}, {"rootfs", "/r"}}}};
  auto t = c->Create(kube::SandboxTemplateResource(), ns, tmpl);
  if (!t.ok() && !kube::IsAlreadyExists(t.status())) return t.status();
  Json apply = {{"metadata", {{"name", "py"}, {"namespace", ns}}},
                {"status", {{"nodes", Json::array({{{"nodeName", node}, {"phase", "Ready"},
                                                    {"observedGeneration", 1}}})}}}};
  return c->Patch(kube::SandboxTemplateResource(), ns, "py", kube::PatchType::kApply, apply,
                  "status", po).status();
}

void MemoryThroughput(int n) {
  kube::FakeKubeClient client;
  const std::string ns = "bench";
  if (Status s = PlayNode(&client, ns, "leases", "node-a"); !s.ok()) {
    std::printf("in-memory: setup failed: %s\n", s.ToString().c_str());
    return;
  }
  metrics::Registry reg;
  op::ControllerOptions opts;
  opts.workers = 4;
  opts.config.node_lease_namespace = "leases";
  op::Controller c(&client, &kube::RealClock::Instance(), &reg, opts);
  if (Status s = c.Start(); !s.ok()) {
    std::printf("in-memory: %s\n", s.ToString().c_str());
    return;
  }
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) (void)client.Create(kube::SandboxResource(), ns, SandboxObj("s" + std::to_string(i)));
  while (true) {
    auto list = client.List(kube::SandboxResource(), ns, {});
    int done = 0;
    for (const Json& s : (*list)["items"]) {
      if (s.contains("status") && s["status"].contains("tokenSha256")) ++done;
    }
    if (done == n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  double ms = MillisSince(start);
  std::printf("%-44s %9.0f sandboxes/s   %9.0f reconciles/s   (n=%d, 4 workers)\n",
              "in-memory: create to Scheduled", n / (ms / 1000), c.Reconciles() / (ms / 1000), n);
  c.Stop();
}

// Watches a namespace and records when each Sandbox first shows a node.
class ScheduledWatch {
 public:
  ScheduledWatch(kube::KubeClient* c, const std::string& ns) : inf_(c, kube::SandboxResource(), ns) {
    inf_.AddHandler([this](kube::WatchEventType, const Json& s) {
      if (!s.contains("status") || s["status"].value("nodeName", "").empty()) return;
      std::lock_guard l(mu_);
      seen_.emplace(s["metadata"]["name"].get<std::string>(), Clock::now());
      cv_.notify_all();
    });
    inf_.Start();
    inf_.WaitForSync(std::chrono::seconds(30));
  }
  // Time at which all `names` were scheduled (false on timeout).
  bool WaitAll(const std::vector<std::string>& names, Clock::time_point* last) {
    std::unique_lock l(mu_);
    bool ok = cv_.wait_for(l, std::chrono::seconds(120), [&] {
      for (const auto& n : names) if (!seen_.count(n)) return false;
      return true;
    });
    *last = Clock::time_point::min();
    for (const auto& n : names) if (seen_.count(n)) *last = std::max(*last, seen_[n]);
    return ok;
  }

 private:
  kube::Informer inf_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Clock::time_point> seen_;
};

// Sum of every series of `metric` (a name prefix ending in '{') in /metrics.
double Scrape(int port, const std::string& metric = "kubicle_operator_reconcile_total{") {
  auto r = e2e::RunCommand({"curl", "-s", "http://127.0.0.1:" + std::to_string(port) + "/metrics"});
  double total = 0;
  if (!r.ok()) return 0;
  size_t pos = 0;
  while ((pos = r->output.find(metric, pos)) != std::string::npos) {
    if (pos > 0 && r->output[pos - 1] != '\n') {
      ++pos;
      continue;
    }
    size_t sp = r->output.find(' ', r->output.find('}', pos));
    total += std::atof(r->output.c_str() + sp + 1);
    pos = sp;
  }
  return total;
}
double ScrapeReconciles(int port) { return Scrape(port); }

int RealApiserver() {
  auto bin = e2e::FindControlPlaneBinDir();
  if (!bin) {
    std::printf("real apiserver: skipped (control plane binaries missing: run "
                "e2e/control-plane/build.sh)\n");
    return 0;
  }
  e2e::ControlPlaneOptions opts;
  opts.bin_dir = *bin;
  opts.crd_dir = std::string(KUBICLE_SOURCE_DIR) + "/crds";
  auto cp = e2e::ControlPlane::Start(opts);
  if (!cp.ok()) {
    std::printf("control plane: %s\n", cp.status().ToString().c_str());
    return 1;
  }
  for (const char* ns : {"bench", "kubicle-node-lease"}) (void)(*cp)->Kubectl({"create", "ns", ns});
  auto client = kube::HttpKubeClient::Create(*(*cp)->RestConfig());
  if (!client.ok() || !PlayNode(client->get(), "bench", "kubicle-node-lease", "node-a").ok()) return 1;
  int port = *e2e::FreePort();
  auto op = e2e::ChildProcess::Spawn(
      {KUBICLE_OPERATOR_BIN, "--kubeconfig=" + (*cp)->kubeconfig_path(), "--leader-elect=false",
       "--node-lease-namespace=kubicle-node-lease", "--metrics-address=127.0.0.1",
       "--metrics-port=" + std::to_string(port), "--log-level=warn"},
      (*cp)->work_dir() + "/operator.log");
  if (!op.ok()) return 1;
  ScheduledWatch watch(client->get(), "bench");
  int seq = 0;
  auto batch = [&](int n) {
    std::vector<std::string> names;
    auto start = Clock::now();
    for (int i = 0; i < n; ++i) {
      names.push_back("b" + std::to_string(seq++));
      (void)(*client)->Create(kube::SandboxResource(), "bench", SandboxObj(names.back()));
    }
    Clock::time_point last;
    if (!watch.WaitAll(names, &last)) return -1.0;
    return std::chrono::duration<double, std::milli>(last - start).count();
  };
  batch(5);  // warm up: caches, connections
  double reconciles0 = ScrapeReconciles(port);
  auto run_start = Clock::now();
  for (auto [n, reps] : std::vector<std::pair<int, int>>{{1, 30}, {20, 5}, {100, 3}}) {
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) samples.push_back(batch(n));
    PrintPercentiles("real apiserver: apply " + std::to_string(n) + " -> all Scheduled", samples, "ms");
  }
  double secs = MillisSince(run_start) / 1000;
  std::printf("%-44s %9.0f reconciles/s over the run (%0.f passes)\n",
              "real apiserver: operator reconcile rate", (ScrapeReconciles(port) - reconciles0) / secs,
              ScrapeReconciles(port) - reconciles0);
  double sum = Scrape(port, "kubicle_operator_reconcile_duration_seconds_sum{");
  double count = Scrape(port, "kubicle_operator_reconcile_duration_seconds_count{");
  std::printf("%-44s %9.2f ms mean per reconcile pass\n", "real apiserver: reconcile duration",
              count > 0 ? 1000 * sum / count : 0.0);
  return 0;
}

}  // namespace
}  // namespace kubicle::bench

int main(int argc, char** argv) {
  kubicle::log::Init("operator_bench", false, kubicle::log::Level::kError);
  kubicle::bench::MemoryThroughput(500);
  if (argc > 1 && std::strcmp(argv[1], "--memory-only") == 0) return 0;
  return kubicle::bench::RealApiserver();
}
