// port-forward: a local port to a TCP port of a Sandbox's VM
// (port_forward.h), until the caller says stop.
#include <iostream>
#include <mutex>

#include "plugin/port_forward.h"
#include "plugin/sandbox_access.h"
#include "plugin/verbs.h"

namespace kubicle::plugin {

int RunPortForward(const Invocation& inv, Env& env) {
  auto usage = [&](const std::string& why) {
    *env.err << "kubectl-kubicle port-forward: " << why
             << "\nSee 'kubectl kubicle port-forward --help'.\n";
    return kExitUsage;
  };
  if (inv.positional.size() != 2) return usage("give a Sandbox and LOCAL:REMOTE");
  auto ports = ParsePortPair(inv.positional[1]);
  if (!ports.ok()) return usage(ports.status().message());
  auto dp = ResolveDataPlane(*env.kube, env.ns, inv.positional[0], env.lease_ns);
  if (!dp.ok()) {
    *env.err << "kubectl-kubicle port-forward: " << dp.status().message() << "\n";
    return kExitFailed;
  }
  const std::string address = inv.Get("address", "127.0.0.1");
  auto err_mu = std::make_shared<std::mutex>();
  std::ostream* err = env.err;
  auto fwd = PortForward::Start(*dp, ports->remote, address, ports->local,
                                [err, err_mu](const std::string& m) {
                                  std::lock_guard l(*err_mu);
                                  *err << "kubectl-kubicle port-forward: " << m << "\n";
                                });
  if (!fwd.ok()) {
    *env.err << "kubectl-kubicle port-forward: " << fwd.status().message() << "\n";
    return kExitFailed;
  }
  *env.out << "Forwarding from " << address << ":" << (*fwd)->local_port() << " -> "
           << ports->remote << std::endl;
  if (env.wait_for_stop) env.wait_for_stop();
  fwd->reset();  // stops listening, ends the streams
  return 0;
}

}  // namespace kubicle::plugin
