// kubicle-e2e-cluster: starts the e2e control plane (and installs the CRDs)
// for manual use and benchmarks; prints the kubeconfig path and runs until
// SIGINT/SIGTERM, then tears everything down.
//   kubicle-e2e-cluster [--no-crds] [--kubelet-node[=NAME]] [--node-label=K=V]...
// --kubelet-node also starts kube-scheduler and the workload controllers and
// joins a real node (containerd + kubelet, e2e/harness/kubelet_node.h,
// default name e2e-node); it prints NODE=<name>, NODE_IP=<address>,
// NODE_DIR=<its scratch directory> and CONTAINERD_SOCKET=<socket> (for
// `ctr -n k8s.io images import`) after the kubeconfig line. Labels go on
// that Node.
#include <signal.h>

#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "common/stop_signals.h"
#include "e2e/harness/control_plane.h"
#include "e2e/harness/kubelet_node.h"

int main(int argc, char** argv) {
  bool crds = true;
  std::string node_name;
  std::map<std::string, std::string> labels;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-crds") {
      crds = false;
    } else if (a == "--kubelet-node") {
      node_name = "e2e-node";
    } else if (a.rfind("--kubelet-node=", 0) == 0) {
      node_name = a.substr(std::strlen("--kubelet-node="));
    } else if (a.rfind("--node-label=", 0) == 0 && a.find('=', 13) != std::string::npos) {
      std::string kv = a.substr(std::strlen("--node-label="));
      labels[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
    } else {
      std::cerr << "usage: kubicle-e2e-cluster [--no-crds] [--kubelet-node[=NAME]] "
                   "[--node-label=K=V]...\n";
      return 2;
    }
  }
  auto bin = kubicle::e2e::FindControlPlaneBinDir();
  if (!bin) {
    std::cerr << "control plane binaries missing: run e2e/control-plane/build.sh\n";
    return 2;
  }
  const kubicle::StopSignals stop;
  kubicle::e2e::ControlPlaneOptions opts;
  opts.bin_dir = *bin;
  if (crds) opts.crd_dir = std::string(KUBICLE_SOURCE_DIR) + "/crds";
  std::optional<kubicle::e2e::NodeSlot> slot;
  if (!node_name.empty()) {
    auto s = kubicle::e2e::NodeSlot::Take();
    if (!s.ok()) {
      std::cerr << s.status().ToString() << "\n";
      return 1;
    }
    slot.emplace(std::move(*s));
    opts = kubicle::e2e::KubeletNode::ControlPlaneFor(*slot, opts);
  }
  auto cp = kubicle::e2e::ControlPlane::Start(opts);
  if (!cp.ok()) {
    std::cerr << cp.status().ToString() << "\n";
    return 1;
  }
  std::cout << "KUBECONFIG=" << (*cp)->kubeconfig_path() << std::endl;
  std::unique_ptr<kubicle::e2e::KubeletNode> node;
  if (slot) {
    kubicle::e2e::KubeletNodeOptions n;
    n.bin_dir = *bin;
    n.node_name = node_name;
    n.labels = labels;
    auto started = kubicle::e2e::KubeletNode::Start(**cp, std::move(*slot), n);
    if (!started.ok()) {
      std::cerr << started.status().ToString() << "\n";
      return 1;
    }
    node = std::move(*started);
    std::cout << "NODE=" << node->node_name() << "\nNODE_IP=" << node->node_ip()
              << "\nNODE_DIR=" << node->slot().dir()
              << "\nCONTAINERD_SOCKET=" << node->slot().dir() << "/containerd.sock" << std::endl;
  }
  stop.Wait();
  if (node) {
    // The node's teardown must leave nothing on the host: say what it left.
    kubicle::Status s = node->Stop();
    if (!s.ok()) {
      std::cerr << "node teardown: " << s.ToString() << std::endl;
      return 1;
    }
    std::cout << "node " << node_name << " torn down: nothing left" << std::endl;
  }
  return 0;
}
