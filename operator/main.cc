// kubicle-operator: schedules Sandboxes, runs their lifecycle (finalizer,
// token, expiry), fans SandboxForks out into child Sandboxes and aggregates
// SandboxTemplate readiness. One leader at a time (Lease); flags below.
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "common/log.h"
#include "operator/controller.h"
#include "operator/kube/http_kube_client.h"
#include "operator/kube/leader_election.h"
#include "operator/metrics_server.h"

namespace {

using kubicle::Status;
namespace kube = kubicle::kube;
namespace op = kubicle::op;

struct Flags {
  std::map<std::string, std::string> v = {
      {"kubeconfig", ""}, {"context", ""}, {"leader-elect", "true"},
      {"leader-election-namespace", "kubicle-system"},
      {"leader-election-lease", "kubicle-operator-leader"}, {"lease-duration-seconds", "15"},
      {"renew-deadline-seconds", "10"}, {"retry-period-seconds", "2"},
      {"node-lease-namespace", "kubicle-node-lease"}, {"default-ttl-seconds", "3600"},
      {"node-gone-grace-seconds", "120"}, {"workers", "4"}, {"metrics-port", "9090"},
      {"metrics-address", "0.0.0.0"}, {"log-format", "text"}, {"log-level", "info"},
      {"identity", ""}};
  long Int(const std::string& k) const { return std::stol(v.at(k)); }
};

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (!a.starts_with("--") || a.find('=') == std::string::npos) {
      std::cerr << "expected --name=value, got " << a << "\n";
      return false;
    }
    std::string k = a.substr(2, a.find('=') - 2);
    if (!f->v.count(k)) {
      std::cerr << "unknown flag --" << k << "\n";
      return false;
    }
    f->v[k] = a.substr(a.find('=') + 1);
  }
  return true;
}

kubicle::Result<kube::RestConfig> LoadConfig(const Flags& f) {
  if (f.v.at("kubeconfig").empty() && std::getenv("KUBERNETES_SERVICE_HOST")) {
    return kube::InClusterConfig();
  }
  return kube::LoadKubeconfig(f.v.at("kubeconfig"), f.v.at("context"));
}

std::string DefaultIdentity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  if (const char* pod = std::getenv("POD_NAME")) return pod;
  return std::string(host) + "_" + std::to_string(getpid());
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::cerr << "usage: kubicle-operator [--flag=value ...]; flags and defaults:\n";
    for (const auto& [k, v] : flags.v) std::cerr << "  --" << k << "=" << v << "\n";
    return 2;
  }
  kubicle::log::Init("kubicle-operator", flags.v["log-format"] == "json",
                     kubicle::log::ParseLevel(flags.v["log-level"]));
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto cfg = LoadConfig(flags);
  if (!cfg.ok()) {
    kubicle::log::Error("no cluster config", {{"error", cfg.status().ToString()}});
    return 1;
  }
  auto client = kube::HttpKubeClient::Create(*cfg);
  if (!client.ok()) {
    kubicle::log::Error("client", {{"error", client.status().ToString()}});
    return 1;
  }
  std::string identity = flags.v["identity"].empty() ? DefaultIdentity() : flags.v["identity"];
  op::ControllerOptions opts;
  opts.workers = static_cast<int>(flags.Int("workers"));
  opts.identity = identity;
  opts.config.default_ttl = std::chrono::seconds(flags.Int("default-ttl-seconds"));
  opts.config.node_gone_grace = std::chrono::seconds(flags.Int("node-gone-grace-seconds"));
  opts.config.node_lease_namespace = flags.v["node-lease-namespace"];

  kubicle::metrics::Registry registry;
  auto& leader_gauge = registry.AddGauge("kubicle_operator_leader", "1 while this replica leads.")
                           .WithLabels({});
  op::Controller controller(client->get(), &kube::RealClock::Instance(), &registry, opts);
  op::MetricsServer metrics(&registry, [] { return true; });
  if (flags.Int("metrics-port") > 0) {
    Status s = metrics.Start(flags.v["metrics-address"], static_cast<int>(flags.Int("metrics-port")));
    if (!s.ok()) {
      kubicle::log::Error("metrics", {{"error", s.ToString()}});
      return 1;
    }
  }

  std::atomic<bool> failed{false};
  kube::CancelToken cancel;
  auto lead = [&] {
    leader_gauge.Set(1);
    Status s = controller.Start();
    if (!s.ok()) {
      kubicle::log::Error("controller start", {{"error", s.ToString()}});
      failed = true;
    }
  };
  std::unique_ptr<kube::LeaderElector> elector;
  std::thread election;
  if (flags.v["leader-elect"] == "true") {
    elector = std::make_unique<kube::LeaderElector>(
        client->get(),
        kube::LeaderElectionConfig{flags.v["leader-election-namespace"],
                                   flags.v["leader-election-lease"], identity,
                                   std::chrono::seconds(flags.Int("lease-duration-seconds")),
                                   std::chrono::seconds(flags.Int("renew-deadline-seconds")),
                                   std::chrono::seconds(flags.Int("retry-period-seconds"))});
    election = std::thread([&] {
      elector->Run(cancel, lead, [&] {
        leader_gauge.Set(0);
        if (!cancel.IsCancelled()) failed = true;  // lost the lease: stop, let a restart rejoin
      });
    });
  } else {
    lead();
  }
  kubicle::log::Info("operator running", {{"identity", identity}});
  timespec tick{0, 200 * 1000 * 1000};
  while (!failed.load() && sigtimedwait(&sigs, nullptr, &tick) < 0) {
  }
  cancel.Cancel();
  if (election.joinable()) election.join();
  controller.Stop();
  if (elector && !failed.load()) (void)elector->Release();
  metrics.Stop();
  kubicle::log::Info("operator stopped", {{"identity", identity}});
  return failed.load() ? 1 : 0;
}
