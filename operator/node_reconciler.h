// Watches each node's heartbeat over time, kube's node lifecycle controller
// in miniature. A Lease that stops being renewed produces no watch event, so
// nothing would look at a dead node's Sandboxes again: each node key
// ("Node:<name>", queued on every event of its Lease) is reconciled at the
// moment its grace would run out (Lease expiry, or first seen missing, plus
// --node-gone-grace-seconds). A renewal moves that moment on; once it has
// passed, every Sandbox placed on the node is queued, and the Sandbox
// reconciler fails those not being deleted (NodeLost) and lets go of those
// being deleted. One timer per node, not per Sandbox.
#pragma once

#include <functional>
#include <string>

#include "operator/context.h"

namespace kubicle::op {

class NodeReconciler final : public Reconciler {
 public:
  // Queues every Sandbox labelled kubicle.dev/node=<node>.
  using EnqueueSandboxesOn = std::function<void(const std::string& node)>;
  NodeReconciler(Context ctx, EnqueueSandboxesOn enqueue)
      : ctx_(std::move(ctx)), enqueue_(std::move(enqueue)) {}

  // `node` is the node's name.
  Result<Outcome> Reconcile(const std::string& node) override;

 private:
  Context ctx_;
  EnqueueSandboxesOn enqueue_;
};

}  // namespace kubicle::op
