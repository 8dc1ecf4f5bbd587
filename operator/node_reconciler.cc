#include "operator/node_reconciler.h"

#include "common/log.h"
#include "operator/nodes.h"

namespace kubicle::op {

Result<Outcome> NodeReconciler::Reconcile(const std::string& node) {
  const kube::TimePoint now = ctx_.clock->Now();
  const NodeStanding st = StandingOf(node, NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now),
                                     ctx_.lease_absence, now, ctx_.config.node_gone_grace);
  Outcome out;
  if (now < st.gone_at) {
    out.RequeueWithin(st.gone_at - now);
    return out;
  }
  log::Info("node gone: its Sandboxes are looked at", {{"node", node}});
  enqueue_(node);
  return out;
}

}  // namespace kubicle::op
