// What the operator knows about nodes, all of it reported by node daemons
// (docs/operator.md, "Node protocol"):
// - liveness and capacity from the node's heartbeat Lease in the node-lease
//   namespace (label kubicle.dev/node=<node>, spec.holderIdentity=<node>,
//   renewTime + leaseDurationSeconds, annotations kubicle.dev/capacity-*);
// - per-template readiness from SandboxTemplate status.nodes[] entries.
// Pure functions of their inputs and `now`.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "operator/api.h"
#include "operator/views.h"

namespace kubicle::op {

struct NodeInfo {
  std::string name;
  bool alive = false;
  kube::TimePoint expires{};  // renewTime + leaseDurationSeconds
  int64_t capacity_sandboxes = 0;
  int64_t capacity_memory_mib = 0;  // 0 = not limited by memory
};

// nullopt for a Lease that is not a node heartbeat.
std::optional<NodeInfo> ParseNodeLease(const Json& lease, kube::TimePoint now);
std::map<std::string, NodeInfo> NodesFromLeases(const std::vector<Json>& leases,
                                                kube::TimePoint now);

// Node names whose template entry is Ready for the template's current
// generation (stale entries from before a spec change do not count).
std::vector<std::string> TemplateReadyNodes(const SandboxTemplateView& tmpl);

// What is already placed on each node (Sandboxes carrying kubicle.dev/node,
// including those still tearing down).
struct NodeLoad {
  int64_t sandboxes = 0;
  int64_t memory_mib = 0;
};

}  // namespace kubicle::op
