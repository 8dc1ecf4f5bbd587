#include "operator/workspace_status.h"

#include <algorithm>

#include "kube/json_fields.h"

namespace kubicle::op {

namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string Phase(const WorkspaceView& ws, const WorkspaceFacts& f) {
  if (ws.meta.deleting) return "Terminating";
  if (f.node.empty()) return "Pending";
  if (!f.token_problem.empty() || !f.node_lost.empty()) return "Failed";
  if (ws.status.disk.state == "Ready") return "Ready";
  if (ws.status.disk.state == "Failed") return "Failed";
  return "Pending";
}

Condition ReadyCondition(const std::string& phase, const WorkspaceView& ws, const WorkspaceFacts& f) {
  const std::string& msg = ws.status.disk.message;
  if (phase == "Terminating") {
    if (!f.holders.empty()) {
      return {"Ready", "False", "InUse",
              "deletion waits for Sandbox " + JoinNames(f.holders) +
                  ", which uses the workspace, to be deleted"};
    }
    return {"Ready", "False", "Terminating",
            "waiting for node " + f.node + " to delete the disk" + (msg.empty() ? "" : ": " + msg)};
  }
  if (phase == "Ready") return {"Ready", "True", "DiskReady", "the disk is ready on node " + f.node};
  if (phase == "Pending") {
    if (f.node.empty()) return {"Ready", "False", "Unscheduled", "waiting for a node"};
    return {"Ready", "False", "Provisioning", "waiting for node " + f.node + " to make the disk"};
  }
  if (!f.node_lost.empty()) return {"Ready", "False", "NodeLost", f.node_lost};
  if (!f.token_problem.empty()) return {"Ready", "False", f.token_problem_reason, f.token_problem};
  return {"Ready", "False", "DiskFailed", msg.empty() ? "the node could not make the disk" : msg};
}

}  // namespace

Json ComputeWorkspaceStatus(const WorkspaceView& ws, const WorkspaceFacts& f, kube::TimePoint now) {
  const int64_t gen = ws.meta.generation;
  const std::string phase = Phase(ws, f);
  Json conds = ws.status.conditions;
  Condition sched = f.node.empty()
                        ? Condition{"Scheduled", "False", f.schedule_reason, f.schedule_message}
                        : Condition{"Scheduled", "True", "Scheduled", "placed on node " + f.node};
  if (sched.reason.empty()) sched.reason = "Pending";
  conds = SetCondition(conds, sched, gen, now);
  const Condition ready = ReadyCondition(phase, ws, f);
  conds = SetCondition(conds, ready, gen, now);
  const Progress progress = phase == "Ready"    ? Progress::kSettled
                            : phase == "Failed" ? Progress::kStalled
                                                : Progress::kWorking;  // Pending, Terminating
  conds = SetProgress(conds, progress, ready, gen, now);
  auto or_null = [](const std::string& s) { return s.empty() ? Json() : Json(s); };
  Json st = {{"observedGeneration", gen},
             {"phase", phase},
             {"conditions", conds},
             {"nodeName", or_null(f.node)},
             {"tokenSecretName", or_null(f.token_secret)},
             {"tokenSha256", or_null(f.token_sha256)},
             {"attachedTo", or_null(JoinNames(f.holders))},
             {"bytesUsed", ws.status.disk.bytes_used ? Json(*ws.status.disk.bytes_used) : Json()}};
  return st;
}

std::vector<std::string> WorkspaceHolders(const std::vector<Json>& sandboxes, const std::string& ns,
                                          const std::string& workspace) {
  std::vector<std::string> out;
  for (const Json& s : sandboxes) {
    if (Namespace(s) != ns || Label(s, kLabelNode).empty()) continue;
    if (ParseSandboxSpec(s, nullptr).workspace == workspace) out.push_back(Name(s));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string WorkspaceTokenSecretName(const std::string& workspace_name) {
  return BoundedName(workspace_name, "-workspace-token");
}

std::string WorkspaceNodeName(const std::string& uid) { return "w-" + uid; }

}  // namespace kubicle::op
