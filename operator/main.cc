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

op::ControllerOptions ControllerOptionsFrom(const Flags& f, const std::string& identity) {
  op::ControllerOptions opts;
  opts.workers = static_cast<int>(f.Int("workers"));
  opts.identity = identity;
  opts.config.default_ttl = std::chrono::seconds(f.Int("default-ttl-seconds"));
  opts.config.node_gone_grace = std::chrono::seconds(f.Int("node-gone-grace-seconds"));
  opts.config.node_lease_namespace = f.v.at("node-lease-namespace");
  return opts;
}

kube::LeaderElectionConfig ElectionConfigFrom(const Flags& f, const std::string& identity) {
  return kube::LeaderElectionConfig{f.v.at("leader-election-namespace"),
                                    f.v.at("leader-election-lease"), identity,
                                    std::chrono::seconds(f.Int("lease-duration-seconds")),
                                    std::chrono::seconds(f.Int("renew-deadline-seconds")),
                                    std::chrono::seconds(f.Int("retry-period-seconds"))};
}

// Runs the controller (behind leader election when asked) until SIGINT or
// SIGTERM, or until leadership is lost; returns the exit status.
int Run(const Flags& flags, kube::KubeClient* client, const sigset_t& sigs) {
  std::string identity = flags.v.at("identity").empty() ? DefaultIdentity() : flags.v.at("identity");
  kubicle::metrics::Registry registry;
  auto& leader_gauge =
      registry.AddGauge("kubicle_operator_leader", "1 while this replica leads.").WithLabels({});
  op::Controller controller(client, &kube::RealClock::Instance(), &registry,
                            ControllerOptionsFrom(flags, identity));
  op::MetricsServer metrics(&registry, [] { return true; });
  if (flags.Int("metrics-port") > 0) {
    Status s = metrics.Start(flags.v.at("metrics-address"), static_cast<int>(flags.Int("metrics-port")));
    if (!s.ok()) {
      kubicle::log::Error("metrics", {{"error", s.ToString()}});
      return 1;
    }
  }
  std::atomic<bool> failed{false};
  kube::CancelToken cancel;
  auto lead = [&] {
    leader_gauge.Set(1);
    if (Status s = controller.Start(); !s.ok()) {
      kubicle::log::Error("controller start", {{"error", s.ToString()}});
      failed = true;
    }
  };
  std::unique_ptr<kube::LeaderElector> elector;
  std::thread election;
  if (flags.v.at("leader-elect") == "true") {
    elector = std::make_unique<kube::LeaderElector>(client, ElectionConfigFrom(flags, identity));
    election = std::thread([&] {
      elector->Run(cancel, lead, [&] {
        leader_gauge.Set(0);
        if (!cancel.IsCancelled()) failed = true;  // lost the Lease: exit, a restart rejoins
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
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);  // before any thread starts
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
  return Run(flags, client->get(), sigs);
}
