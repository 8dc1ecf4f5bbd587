// Reconciles one SandboxTemplate: checks what the schema cannot, or checks
// again what a CRD installed without its schema would let through (exactly
// one of spec.image and spec.rootfs, an image reference naming its registry,
// kernel/initrd/rootfs sources are absolute paths or URLs, warm-up commands
// are non-empty) and
// aggregates the per-node entries that node daemons write into
// status.nodes[] into readyNodes, phase and the Valid/Ready conditions. Only
// entries of live nodes (fresh heartbeat Lease) for the current generation
// count; the pass is requeued for the moment the next one goes stale. Each
// pass also ensures the template's run-token Secret and publishes its hash
// (run_token.h).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "operator/context.h"
#include "operator/nodes.h"
#include "operator/api.h"

namespace kubicle::op {

// The view's shape problems, then what the schema cannot check.
std::vector<std::string> ValidateTemplate(const SandboxTemplateView& tmpl);
Json ComputeTemplateStatus(const SandboxTemplateView& tmpl, const std::vector<std::string>& problems,
                           const std::map<std::string, NodeInfo>& nodes, kube::TimePoint now);

class TemplateReconciler final : public Reconciler {
 public:
  explicit TemplateReconciler(Context ctx) : ctx_(std::move(ctx)) {}
  Result<Outcome> Reconcile(const std::string& key) override;

 private:
  Context ctx_;
};

}  // namespace kubicle::op
