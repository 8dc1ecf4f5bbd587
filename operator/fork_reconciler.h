// Reconciles one SandboxFork: N child Sandboxes named <fork>-<i> (so a
// restarted operator finds the ones it made instead of making more), owned
// by the fork (controller ownerReference: deleting the fork lets the
// garbage collector delete them), placed on the source's node, labelled
// with the source's run/agent/template, the fork's run, the fork's
// childMetadata labels and kubicle.dev/fork-of. Scaling down deletes the
// highest indexes. Status: counts and children, written only when changed.
// A spec the view cannot read (kube/api/types.h) makes no children: Ready False
// InvalidSpec names the fields.
#pragma once

#include <string>
#include <vector>

#include "operator/context.h"
#include "operator/api.h"

namespace kubicle::op {

// The child Sandbox a fork wants at `index` (pure).
Json DesiredForkChild(const SandboxForkView& fork, const SandboxView& source,
                      const std::string& node, int index);
std::string ForkChildName(const std::string& fork_name, int index);

// Why a fork makes no children (reason "" = it does), for its Ready condition.
struct ForkWait {
  std::string reason;   // SourceNotFound, SourceDeleting, SourceNotScheduled, NameConflict, InvalidSpec
  std::string message;  // "" = "waiting for the source"
};
// {observedGeneration, phase, nodeName, replicas, readyReplicas,
//  failedReplicas, children, conditions} from the children that exist.
Json ComputeForkStatus(const SandboxForkView& fork, const std::string& node, const ForkWait& wait,
                       const std::vector<Json>& children, kube::TimePoint now);

class ForkReconciler final : public Reconciler {
 public:
  explicit ForkReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key) override;

 private:
  std::vector<Json> Children(const SandboxForkView& fork);
  Status EnsureChildren(const SandboxForkView& fork, const SandboxView& source,
                        const std::string& node, std::vector<Json>* children);
  Status ScaleDown(const SandboxForkView& fork, std::vector<Json>* children);

  Context ctx_;
};

}  // namespace kubicle::op
