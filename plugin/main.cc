// kubectl-kubicle: the kubectl plugin (`kubectl kubicle ...`), see
// docs/kubectl-plugin.md. main() only parses, connects and dispatches.
#include <cstdlib>
#include <iostream>
#include <optional>

#include "common/cli_exit.h"
#include "common/stop_signals.h"

#include "kube/http_kube_client.h"
#include "kube/kubeconfig_chain.h"
#include "plugin/args.h"
#include "plugin/verbs.h"

using namespace kubicle;

namespace {

int RunPlugin(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto inv = plugin::ParseArgs(args);
  if (!inv.ok()) {
    std::cerr << "kubectl-kubicle: " << inv.status().message()
              << "\nSee 'kubectl kubicle --help'.\n";
    return plugin::kExitUsage;
  }
  if (inv->help) {
    std::cout << plugin::Usage(inv->verb);
    return 0;
  }
  // port-forward runs until SIGINT/SIGTERM: taken synchronously, so they
  // are blocked before any thread starts (the other verbs keep the default
  // of dying on Ctrl-C).
  std::optional<StopSignals> stop;
  if (inv->verb == "port-forward") stop.emplace();
  auto cfg = kube::LoadKubeconfigLikeKubectl(inv->global.kubeconfig, inv->global.context);
  // In a pod without a kubeconfig: the service account, as kubectl does.
  if (!cfg.ok() && inv->global.kubeconfig.empty() && std::getenv("KUBERNETES_SERVICE_HOST") &&
      !std::getenv("KUBECONFIG")) {
    cfg = kube::InClusterConfig();
  }
  if (!cfg.ok()) {
    std::cerr << "kubectl-kubicle: " << cfg.status().message() << "\n";
    return plugin::kExitFailed;
  }
  auto client = kube::HttpKubeClient::Create(*cfg);
  if (!client.ok()) {
    std::cerr << "kubectl-kubicle: " << client.status().message() << "\n";
    return plugin::kExitFailed;
  }
  plugin::Env env;
  env.kube = client->get();
  env.ns = inv->global.ns.empty() ? cfg->ns : inv->global.ns;
  env.lease_ns = inv->global.node_lease_namespace;
  env.in = &std::cin;
  env.out = &std::cout;
  env.err = &std::cerr;
  if (stop) env.wait_for_stop = [&stop] { stop->Wait(); };
  return plugin::RunVerb(*inv, env);
}

}  // namespace

int main(int argc, char** argv) { ExitCli(RunPlugin(argc, argv)); }
