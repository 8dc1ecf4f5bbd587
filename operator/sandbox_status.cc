#include "operator/sandbox_status.h"

#include "kube/time_format.h"

namespace kubicle::op {

std::optional<kube::TimePoint> ComputeExpiry(const SandboxView& sbx, kube::Duration default_ttl) {
  if (sbx.spec.expires_at) {
    auto t = kube::ParseTime(*sbx.spec.expires_at);
    if (t.ok()) return *t;
    return std::nullopt;
  }
  auto created = kube::ParseTime(sbx.meta.creation_timestamp);
  if (!created.ok()) return std::nullopt;
  if (sbx.spec.ttl_seconds) return *created + std::chrono::seconds(*sbx.spec.ttl_seconds);
  if (default_ttl == kube::Duration::zero()) return std::nullopt;
  return *created + default_ttl;
}

std::string ComputePhase(const SandboxView& sbx, const std::string& node, bool node_lost) {
  if (sbx.meta.deleting) return "Terminating";
  if (node.empty()) return "Pending";
  if (node_lost) return "Failed";
  const std::string& vm = sbx.status.vm.state;
  if (vm == "Restoring" || vm == "Forking") return "Starting";
  if (vm == "Running") return "Running";
  // The node suspended it (spec.suspend): it stays placed on that node.
  if (vm == "Suspended") return "Suspended";
  if (vm == "Failed" || vm == "Terminated") return "Failed";
  return "Scheduled";
}

namespace {

Condition ReadyCondition(const std::string& phase, const SandboxView& sbx, const SandboxFacts& f) {
  const std::string& node_lost = f.node_lost;
  if (phase == "Failed" && !node_lost.empty()) return {"Ready", "False", "NodeLost", node_lost};
  if (phase == "Failed" && !f.token_problem.empty()) {
    return {"Ready", "False", f.token_problem_reason, f.token_problem};
  }
  const std::string& vm_message = sbx.status.vm.message;
  if (phase == "Running") return {"Ready", "True", "Running", "the VM is running"};
  if (phase == "Pending") return {"Ready", "False", "Unscheduled", "waiting for a node"};
  if (phase == "Scheduled" && sbx.status.vm.state == "Waiting") {
    // The node refused to attach the workspace: another writer has it there.
    return {"Ready", "False", "WorkspaceInUse", vm_message.empty() ? "the workspace is in use on the node" : vm_message};
  }
  if (phase == "Scheduled") return {"Ready", "False", "Scheduled", "waiting for the node to restore the VM"};
  if (phase == "Starting") return {"Ready", "False", "Starting", "the node is starting the VM"};
  if (phase == "Terminating") return {"Ready", "False", "Terminating", "the Sandbox is being deleted"};
  if (phase == "Suspended") return {"Ready", "False", "Suspended", "the VM is suspended (spec.suspend)"};
  return {"Ready", "False", "VMFailed", vm_message.empty() ? "the VM failed" : vm_message};
}

// Suspended: from the first spec.suspend on (a Sandbox never suspended
// carries no such condition). True once the node reports the VM suspended;
// False while it gets there or back, and once resumed.
std::optional<Condition> SuspendedCondition(const SandboxView& sbx) {
  const bool had = FindCondition(sbx.object, "Suspended").has_value();
  if (!sbx.spec.suspend && !had) return std::nullopt;
  const std::string& vm = sbx.status.vm.state;
  if (vm == "Suspended" && sbx.spec.suspend)
    return Condition{"Suspended", "True", "Suspended", "the VM's memory, devices and disks are saved on its node"};
  if (vm == "Suspended") return Condition{"Suspended", "False", "Resuming", "the node is resuming the VM"};
  if (sbx.spec.suspend) return Condition{"Suspended", "False", "Suspending", "the node is suspending the VM"};
  return Condition{"Suspended", "False", "Resumed", "the VM runs again"};
}

// What is still under way (Reconciling), or why nothing more will happen
// (Stalled): a Failed Sandbox is stalled with its Ready reason, so kstatus
// reports Failed with the node's message instead of InProgress forever.
Progress SandboxProgress(const std::string& phase, const SandboxView& sbx, Condition* why) {
  if (phase == "Failed") return Progress::kStalled;
  if (phase == "Running" && sbx.spec.suspend) {
    *why = {"", "", "Suspending", "the node is suspending the VM"};
    return Progress::kWorking;
  }
  if (phase == "Suspended" && !sbx.spec.suspend) {
    *why = {"", "", "Resuming", "the node is resuming the VM"};
    return Progress::kWorking;
  }
  // Running, or suspended as asked: nothing is under way.
  if (phase == "Running" || phase == "Suspended") return Progress::kSettled;
  return Progress::kWorking;  // Pending, Scheduled, Starting, Terminating
}

}  // namespace

Json ComputeSandboxStatus(const SandboxView& sbx, const SandboxFacts& f, kube::TimePoint now) {
  const int64_t gen = sbx.meta.generation;
  std::string phase = ComputePhase(sbx, f.node, !f.node_lost.empty());
  if (!f.token_problem.empty() && !sbx.meta.deleting) phase = "Failed";
  Json conds = sbx.status.conditions;
  Condition sched = f.node.empty()
                        ? Condition{"Scheduled", "False", f.schedule_reason, f.schedule_message}
                        : Condition{"Scheduled", "True", "Scheduled", "placed on node " + f.node};
  if (sched.reason.empty()) sched.reason = "Pending";
  conds = SetCondition(conds, sched, gen, now);
  Condition ready = ReadyCondition(phase, sbx, f);
  conds = SetCondition(conds, ready, gen, now);
  const Progress progress = SandboxProgress(phase, sbx, &ready);  // may say why instead
  conds = SetProgress(conds, progress, ready, gen, now);
  Condition exp = f.expired ? Condition{"Expired", "True", "TTLExpired", "the Sandbox reached its expiry"}
                  : f.expires ? Condition{"Expired", "False", "NotExpired", "expires at " + kube::FormatTime(*f.expires)}
                              : Condition{"Expired", "False", "NoExpiry", "the Sandbox does not expire"};
  conds = SetCondition(conds, exp, gen, now);
  if (auto susp = SuspendedCondition(sbx)) conds = SetCondition(conds, *susp, gen, now);
  Json st = {{"observedGeneration", gen}, {"phase", phase}, {"conditions", conds}};
  if (!f.node.empty()) st["nodeName"] = f.node;
  if (f.expires) st["expiresAt"] = kube::FormatTime(*f.expires);
  if (!f.token_secret.empty()) st["tokenSecretName"] = f.token_secret;
  if (!f.token_sha256.empty()) st["tokenSha256"] = f.token_sha256;
  return st;
}

}  // namespace kubicle::op
