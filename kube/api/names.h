// Names fixed by the kubicle.dev API: labels, finalizers, annotations,
// condition types, and the node ids clients address on the data plane. The
// operator, the node agent and the plugin take them from here, so a key is
// spelled once (docs/api.md, docs/operator.md "Node protocol").
#pragma once

#include <string>
#include <string_view>

namespace kubicle::kube::api {

inline constexpr std::string_view kGroupVersion = "kubicle.dev/v1alpha1";

// Labels on the API's objects.
inline constexpr std::string_view kLabelRun = "kubicle.dev/run";
inline constexpr std::string_view kLabelAgent = "kubicle.dev/agent";
inline constexpr std::string_view kLabelTemplate = "kubicle.dev/template";
inline constexpr std::string_view kLabelNode = "kubicle.dev/node";
inline constexpr std::string_view kLabelForkOf = "kubicle.dev/fork-of";
// Labels the node agent puts on what it makes on the node (VMs, disks).
inline constexpr std::string_view kLabelSandboxUid = "kubicle.dev/sandbox-uid";
inline constexpr std::string_view kLabelWorkspaceUid = "kubicle.dev/workspace-uid";
inline constexpr std::string_view kLabelNamespace = "kubicle.dev/namespace";

inline constexpr std::string_view kFinalizer = "kubicle.dev/vm-teardown";
// Held on a Workspace until its node reports the disk deleted.
inline constexpr std::string_view kWorkspaceFinalizer = "kubicle.dev/workspace-teardown";

// Node heartbeat Leases (docs/operator.md, "Node protocol").
inline constexpr std::string_view kAnnotationCapacitySandboxes = "kubicle.dev/capacity-sandboxes";
inline constexpr std::string_view kAnnotationCapacityMemory = "kubicle.dev/capacity-memory-mib";
// The CA (PEM) that signed the node's data-plane serving certificate.
inline constexpr std::string_view kAnnotationServingCa = "kubicle.dev/serving-ca";

inline constexpr std::string_view kCondReady = "Ready";
inline constexpr std::string_view kCondScheduled = "Scheduled";
inline constexpr std::string_view kCondExpired = "Expired";
inline constexpr std::string_view kCondValid = "Valid";
// The abnormal-true pair kstatus (Flux, kpt) reads, and the chart's Argo CD
// health checks (helm/kubicle/argocd) with it (operator/api.h SetProgress).
inline constexpr std::string_view kCondReconciling = "Reconciling";
inline constexpr std::string_view kCondStalled = "Stalled";

// "kubicle.dev/node=<node>": what a node agent watches.
inline std::string NodeSelector(std::string_view node) {
  return std::string(kLabelNode) + "=" + std::string(node);
}

// "kubicle-node-<node>": the name of a node's heartbeat Lease.
inline std::string NodeLeaseName(std::string_view node) {
  return "kubicle-node-" + std::string(node);
}

// "k-<uid>": the node's id of the VM of the Sandbox with this metadata.uid,
// under which clients address it on the node's data plane. Derived from the
// UID, never the name: unique, stable across node restarts, never reused.
inline std::string SandboxVmId(std::string_view uid) { return "k-" + std::string(uid); }

}  // namespace kubicle::kube::api
