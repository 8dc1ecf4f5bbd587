// kubicle-operator: schedules Sandboxes, runs their lifecycle (finalizer,
// token, expiry), fans SandboxForks out into child Sandboxes and aggregates
// SandboxTemplate readiness. One leader at a time (Lease); flags below,
// written --name=value. --check-flags validates them and exits (the Helm
// chart's test runs the rendered command line with it).
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <iostream>
#include <map>
#include <string>

#include "common/log.h"
#include "operator/controller.h"
#include "kube/http_kube_client.h"
#include "kube/leader_election.h"
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
  bool check = false;  // --check-flags
  long Int(const std::string& k) const { return std::stol(v.at(k)); }
};

// Integer flags and their ranges: checked up front so a bad value is a usage
// error (and fails --check-flags) rather than std::stol throwing later.
struct IntFlag {
  const char* name;
  long min, max;
};
constexpr IntFlag kIntFlags[] = {
    {"lease-duration-seconds", 1, 3600}, {"renew-deadline-seconds", 1, 3600},
    {"retry-period-seconds", 1, 3600},   {"default-ttl-seconds", 0, 10L * 365 * 86400},
    {"node-gone-grace-seconds", 0, 30L * 86400}, {"workers", 1, 1024},
    {"metrics-port", 0, 65535}};

Status CheckChoice(const Flags& f, const std::string& k, std::initializer_list<const char*> ok) {
  std::string names;
  for (const char* c : ok) {
    if (f.v.at(k) == c) return Status::Ok();
    names += names.empty() ? c : std::string(", ") + c;
  }
  return Status::InvalidArgument("--" + k + ": \"" + f.v.at(k) + "\" is not one of " + names);
}

Status ValidateFlags(const Flags& f) {
  for (const IntFlag& i : kIntFlags) {
    const std::string& text = f.v.at(i.name);
    long n = 0;
    auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc() || p != text.data() + text.size() || n < i.min ||
        n > i.max) {
      return Status::InvalidArgument("--" + std::string(i.name) + ": \"" + text +
                                     "\" is not a number in [" + std::to_string(i.min) + ", " +
                                     std::to_string(i.max) + "]");
    }
  }
  RETURN_IF_ERROR(CheckChoice(f, "leader-elect", {"true", "false"}));
  RETURN_IF_ERROR(CheckChoice(f, "log-format", {"text", "json"}));
  RETURN_IF_ERROR(CheckChoice(f, "log-level", {"debug", "info", "warn", "error"}));
  // client-go's rule: the leader must give up (renew deadline) before its
  // Lease can be taken, and retry more often than that.
  if (f.v.at("leader-elect") == "true" &&
      !(f.Int("lease-duration-seconds") > f.Int("renew-deadline-seconds") &&
        f.Int("renew-deadline-seconds") > f.Int("retry-period-seconds"))) {
    return Status::InvalidArgument(
        "leader election needs --lease-duration-seconds > --renew-deadline-seconds > "
        "--retry-period-seconds");
  }
  for (const char* k : {"leader-election-namespace", "leader-election-lease",
                        "node-lease-namespace", "metrics-address"}) {
    if (f.v.at(k).empty()) return Status::InvalidArgument("--" + std::string(k) + " needs a value");
  }
  return Status::Ok();
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--check-flags") {
      f->check = true;
      continue;
    }
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
  if (Status s = ValidateFlags(*f); !s.ok()) {
    std::cerr << s.message() << "\n";
    return false;
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
    for (const auto& [k, v] : Flags{}.v) std::cerr << "  --" << k << "=" << v << "\n";
    std::cerr << "  --check-flags  (validate the flags, print \"kubicle-operator: flags ok\", "
                 "exit 0)\n";
    return 2;
  }
  if (flags.check) {
    std::cout << "kubicle-operator: flags ok\n";
    return 0;
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
