// A real Kubernetes control plane on loopback for e2e tests and benchmarks:
// etcd, kube-apiserver and kube-controller-manager (garbage collector and
// namespace controllers) built by e2e/control-plane/build.sh. Start()
// generates a CA and certificates with the openssl CLI, starts the three,
// writes an admin kubeconfig, and waits until /readyz answers and the
// controller manager is running. The destructor tears everything down
// (children also die with the test process: PR_SET_PDEATHSIG). All state
// lives in work_dir; logs are etcd.log, kube-apiserver.log, ... there.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "e2e/harness/process.h"
#include "kube/kubeconfig.h"

namespace kubicle::e2e {

// The control-plane bin dir: $KUBICLE_CONTROL_PLANE_BIN, else what
// e2e/control-plane/build.sh --print-bin-dir reports; nullopt when the
// binaries are not all there (tests then skip, saying how to build them).
std::optional<std::string> FindControlPlaneBinDir();

struct ControlPlaneOptions {
  std::string bin_dir;
  std::string work_dir;  // empty: a fresh directory under /tmp
  bool controller_manager = true;
  std::string crd_dir;  // installed before the controller manager starts
  std::chrono::seconds start_timeout{120};
  // What pods need (a KubeletNode): kube-scheduler; the Deployment,
  // ReplicaSet, DaemonSet, ServiceAccount and token controllers and the
  // kube-root-ca.crt publisher; and an apiserver bound to every address,
  // so the node can route the `kubernetes` Service to it.
  bool workloads = false;
  // The Service range and the `kubernetes` Service's address in it (also in
  // the serving certificate): distinct per node slot, so two clusters on one
  // host route their Service addresses apart (kubelet_node.h).
  std::string service_cidr = "10.0.0.0/24";
  std::string service_ip = "10.0.0.1";
};

class ControlPlane {
 public:
  static Result<std::unique_ptr<ControlPlane>> Start(ControlPlaneOptions opts);
  ~ControlPlane();

  const std::string& kubeconfig_path() const { return kubeconfig_; }
  const std::string& work_dir() const { return opts_.work_dir; }
  const std::string& bin_dir() const { return opts_.bin_dir; }
  Result<kube::RestConfig> RestConfig() const;
  int api_port() const { return api_port_; }
  const ControlPlaneOptions& options() const { return opts_; }

  // A client certificate for `subject` (e.g. /O=system:nodes/CN=system:node:n)
  // signed by the cluster CA, as a kubeconfig at `path` (files <name>.*).
  Status WriteClientKubeconfig(const std::string& name, const std::string& subject,
                               const std::string& path);

  // Stops kube-apiserver and starts it again on the same port and etcd
  // (watches across it must recover); waits for /readyz.
  Status RestartApiserver();
  // kubectl / helm with this cluster's kubeconfig.
  Result<CommandResult> Kubectl(const std::vector<std::string>& args,
                                const std::string& input = {});
  Result<CommandResult> Helm(const std::vector<std::string>& args);
  // kubectl apply -f each CRD file in `crd_dir` and wait until Established.
  Status InstallCrds(const std::string& crd_dir);

 private:
  explicit ControlPlane(ControlPlaneOptions opts) : opts_(std::move(opts)) {}
  Status GenerateCertificates();
  Status WriteKubeconfig(const std::string& path, const std::string& user);
  Status StartEtcd();
  Status StartApiserver();
  Status StartControllerManager();
  Status StartScheduler();
  Status WaitReady(std::chrono::seconds timeout);
  std::string Path(const std::string& name) const { return opts_.work_dir + "/" + name; }

  ControlPlaneOptions opts_;
  int etcd_port_ = 0, etcd_peer_port_ = 0, api_port_ = 0;
  std::string kubeconfig_;
  ChildProcess etcd_, apiserver_, controller_manager_, scheduler_;
};

}  // namespace kubicle::e2e
