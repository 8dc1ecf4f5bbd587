// What the operator knows about nodes, all of it reported by node daemons
// (docs/operator.md, "Node protocol"):
// - liveness and capacity from the node's heartbeat Lease in the node-lease
//   namespace (label kubicle.dev/node=<node>, spec.holderIdentity=<node>,
//   renewTime + leaseDurationSeconds, annotations kubicle.dev/capacity-*);
// - per-template readiness from SandboxTemplate status.nodes[] entries.
// Pure functions of their inputs and `now`.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "operator/api.h"

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

// When the operator first saw each node without a heartbeat Lease. A
// missing Lease (deleted, or relabelled so it names another node) counts as
// one that expired at that moment, so the same grace period applies before
// a node's VMs are written off and its finalizers released; a Lease that
// comes back clears the record. In memory only: after an operator restart
// the grace starts again, which errs on the side of keeping a live VM.
// Thread-safe (reconcile workers share it).
class LeaseAbsence {
 public:
  // The moment `node` was first seen missing (now, on the first call).
  kube::TimePoint MissingSince(const std::string& node, kube::TimePoint now);
  void Seen(const std::string& node);

 private:
  std::mutex mu_;
  std::map<std::string, kube::TimePoint> missing_since_;
};

// Where a placed Sandbox's node stands, from its Lease (or its absence).
struct NodeStanding {
  bool alive = false;
  bool has_lease = false;
  kube::TimePoint expired_at{};  // Lease expiry, or when it was first seen missing
  kube::TimePoint gone_at{};     // expired_at + grace: its VMs are written off
};
NodeStanding StandingOf(const std::string& node, const std::map<std::string, NodeInfo>& nodes,
                        LeaseAbsence* absence, kube::TimePoint now, kube::Duration grace);

// What is already placed on each node (Sandboxes carrying kubicle.dev/node,
// including those still tearing down).
struct NodeLoad {
  int64_t sandboxes = 0;
  int64_t memory_mib = 0;
};

}  // namespace kubicle::op
