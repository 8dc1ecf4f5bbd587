// kubicle-operator: schedules Sandboxes, runs their lifecycle (finalizer,
// token, expiry), fans SandboxForks out into child Sandboxes and aggregates
// SandboxTemplate readiness. One leader at a time (Lease); flags in
// operator/flags.h, written --name=value or --name value. --check-flags
// validates them and exits (the Helm chart's test runs the rendered command
// line with it).
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "common/log.h"
#include "common/stop_signals.h"
#include "operator/controller.h"
#include "operator/flags.h"
#include "kube/http_kube_client.h"
#include "kube/leader_election.h"
#include "operator/metrics_server.h"

namespace {

using kubicle::Status;
namespace kube = kubicle::kube;
namespace op = kubicle::op;

using Flags = op::OperatorFlags;

kubicle::Result<kube::RestConfig> LoadConfig(const Flags& f) {
  if (f.Get("kubeconfig").empty() && std::getenv("KUBERNETES_SERVICE_HOST")) {
    return kube::InClusterConfig();
  }
  return kube::LoadKubeconfig(f.Get("kubeconfig"), f.Get("context"));
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
  opts.config.node_lease_namespace = f.Get("node-lease-namespace");
  return opts;
}

kube::LeaderElectionConfig ElectionConfigFrom(const Flags& f, const std::string& identity) {
  return kube::LeaderElectionConfig{f.Get("leader-election-namespace"),
                                    f.Get("leader-election-lease"), identity,
                                    std::chrono::seconds(f.Int("lease-duration-seconds")),
                                    std::chrono::seconds(f.Int("renew-deadline-seconds")),
                                    std::chrono::seconds(f.Int("retry-period-seconds"))};
}

// Runs the controller (behind leader election when asked) until SIGINT or
// SIGTERM, or until leadership is lost; returns the exit status.
int Run(const Flags& flags, kube::KubeClient* client, const kubicle::StopSignals& stop) {
  std::string identity = flags.Get("identity").empty() ? DefaultIdentity() : flags.Get("identity");
  kubicle::metrics::Registry registry;
  auto& leader_gauge =
      registry.AddGauge("kubicle_operator_leader", "1 while this replica leads.").WithLabels({});
  op::Controller controller(client, &kube::RealClock::Instance(), &registry,
                            ControllerOptionsFrom(flags, identity));
  op::MetricsServer metrics(&registry, [] { return true; });
  if (flags.Int("metrics-port") > 0) {
    Status s = metrics.Start(flags.Get("metrics-address"), static_cast<int>(flags.Int("metrics-port")));
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
  if (flags.Get("leader-elect") == "true") {
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
  while (!failed.load() && stop.WaitFor(std::chrono::milliseconds(200)) == 0) {
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
  auto parsed = op::ParseOperatorFlags({argv + 1, argv + argc});
  if (!parsed.ok()) {
    std::cerr << "kubicle-operator: " << parsed.status().message() << "\n" << op::OperatorUsage();
    return 2;
  }
  const Flags& flags = *parsed;
  if (flags.help) {
    std::cout << op::OperatorUsage();
    return 0;
  }
  if (flags.check) {
    std::cout << "kubicle-operator: flags ok\n";
    return 0;
  }
  kubicle::log::Init("kubicle-operator", flags.Get("log-format") == "json",
                     kubicle::log::ParseLevel(flags.Get("log-level")));
  const kubicle::StopSignals stop;  // before any thread starts
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
  return Run(flags, client->get(), stop);
}
