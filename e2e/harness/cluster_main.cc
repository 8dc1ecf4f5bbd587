// kubicle-e2e-cluster: starts the e2e control plane (and installs the CRDs)
// for manual use and benchmarks; prints the kubeconfig path and runs until
// SIGINT/SIGTERM, then tears everything down.
//   kubicle-e2e-cluster [--no-crds]
#include <signal.h>

#include <cstring>
#include <iostream>
#include <thread>

#include "common/stop_signals.h"
#include "e2e/harness/control_plane.h"

int main(int argc, char** argv) {
  bool crds = !(argc > 1 && std::strcmp(argv[1], "--no-crds") == 0);
  auto bin = kubicle::e2e::FindControlPlaneBinDir();
  if (!bin) {
    std::cerr << "control plane binaries missing: run e2e/control-plane/build.sh\n";
    return 2;
  }
  const kubicle::StopSignals stop;
  kubicle::e2e::ControlPlaneOptions opts;
  opts.bin_dir = *bin;
  if (crds) opts.crd_dir = std::string(KUBICLE_SOURCE_DIR) + "/crds";
  auto cp = kubicle::e2e::ControlPlane::Start(opts);
  if (!cp.ok()) {
    std::cerr << cp.status().ToString() << "\n";
    return 1;
  }
  std::cout << "KUBECONFIG=" << (*cp)->kubeconfig_path() << std::endl;
  stop.Wait();
  return 0;
}
