// KubeletNode: a real Kubernetes node on this host for the e2e tier --
// Debian's containerd (with runc and the CNI plugins from /usr/lib/cni) and
// the kubelet built by e2e/control-plane/build.sh -- joined to a
// ControlPlane started with `workloads` (kube-scheduler and the workload
// controllers). Everything lives in its NodeSlot: its own containerd config,
// root, state and socket; a bridge CNI network on the slot's pod range; a
// kubelet with its own root dir, cgroup root (cgroupfs, cgroup v1 allowed)
// and ports; an identity of its own (a client certificate for
// system:node:<name>, bound to the system:node role: the control plane
// authorizes with RBAC only).
//
// Pods reach the apiserver as in a cluster, at the `kubernetes` Service's
// address: no kube-proxy is built, so the slot's nftables table DNATs that
// address's port 443 to the apiserver's port on the host's address, for
// traffic from pods (prerouting) and from the host's own network namespace
// (output: hostNetwork pods such as kubicle-node's).
//
// Images: no registry is reachable, so images are OCI archives imported
// with `ctr -n k8s.io images import` (pods use IfNotPresent and pinned
// tags). The pod sandbox ("pause") image is one built from busybox-static
// by e2e/harness/oci_image.py. The destructor tears the node down through
// NodeSlot::CleanUp; the kubelet rewrites three kernel sysctls on the host
// (kernel.panic, kernel.panic_on_oops, vm.overcommit_memory: the kubelet
// refuses to start with protectKernelDefaults when they differ) and the
// slot's last holder restores them.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "e2e/harness/control_plane.h"
#include "e2e/harness/node_slot.h"
#include "e2e/harness/process.h"

namespace kubicle::e2e {

// The image every pod sandbox of the harness's nodes runs, and a shell for
// test pods: busybox-static with `sleep` as its entrypoint.
inline constexpr char kE2EBusyboxImage[] = "kubicle.dev/e2e/busybox:1";

struct KubeletNodeOptions {
  std::string bin_dir;  // kubelet and crictl (the control plane's bin dir)
  std::string node_name = "e2e-node";
  std::map<std::string, std::string> labels;
  std::string node_ip;  // empty: the host's address on its default route
  std::chrono::seconds start_timeout{180};
};

class KubeletNode {
 public:
  // `cp` must have been started with options from `slot` (StartOptions) and
  // outlive the node.
  static Result<std::unique_ptr<KubeletNode>> Start(ControlPlane& cp, NodeSlot slot,
                                                    KubeletNodeOptions opts);
  ~KubeletNode();

  // ControlPlaneOptions for a cluster that will get a node in `slot`.
  static ControlPlaneOptions ControlPlaneFor(const NodeSlot& slot, ControlPlaneOptions base);

  const std::string& node_name() const { return opts_.node_name; }
  const std::string& node_ip() const { return opts_.node_ip; }
  const NodeSlot& slot() const { return slot_; }
  std::string log_path(const std::string& component) const {
    return slot_.dir() + "/" + component + ".log";
  }

  // `ctr -n k8s.io images import ARCHIVE` on this node's containerd.
  Status ImportImage(const std::string& archive);
  // ctr / crictl against this node's containerd.
  Result<CommandResult> Ctr(const std::vector<std::string>& args);
  Result<CommandResult> Crictl(const std::vector<std::string>& args);

  // Stops the kubelet, removes every pod through the CRI (CNI DEL, volume
  // unmounts), stops containerd and cleans the slot; idempotent.
  Status Stop();

 private:
  KubeletNode(ControlPlane& cp, NodeSlot slot, KubeletNodeOptions opts)
      : cp_(cp), slot_(std::move(slot)), opts_(std::move(opts)) {}
  std::string Path(const std::string& name) const { return slot_.dir() + "/" + name; }
  Status WriteContainerdConfig();
  Status WriteCniConfig();
  Status WriteKubeletConfig();
  Status RouteServiceToApiserver();
  Status StartContainerd();
  Status StartKubelet();
  Status WaitNodeReady();

  ControlPlane& cp_;
  NodeSlot slot_;
  KubeletNodeOptions opts_;
  int stream_port_ = 0, kubelet_port_ = 0, healthz_port_ = 0;
  ChildProcess containerd_, kubelet_;
  bool stopped_ = false;
};

}  // namespace kubicle::e2e
