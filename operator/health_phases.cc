#include "operator/health_phases.h"

#include "kube/time_format.h"
#include "operator/fork_reconciler.h"
#include "operator/sandbox_status.h"
#include "operator/template_reconciler.h"
#include "operator/workspace_status.h"

namespace kubicle::op {

namespace {

const kube::TimePoint kNow = *kube::ParseTime("2026-12-01T00:00:10Z");

Json Object(const std::string& kind, const std::string& name, Json spec) {
  return Json{{"apiVersion", "kubicle.dev/v1alpha1"},
              {"kind", kind},
              {"metadata",
               {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name},
                {"generation", 1}, {"creationTimestamp", "2026-12-01T00:00:00Z"}}},
              {"spec", std::move(spec)}};
}

// `obj` with the node's part of status (`reported`) and the operator's
// computed part merged over it, as the apiserver would hold them.
Json WithStatus(Json obj, const Json& reported, const Json& computed) {
  obj["status"] = reported.is_object() ? reported : Json::object();
  for (const auto& [k, v] : computed.items()) {
    if (v.is_null()) obj["status"].erase(k);  // merge patch: null clears
    else obj["status"][k] = v;
  }
  return obj;
}

void Deleting(Json* obj) { (*obj)["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:09Z"; }

// --- Sandbox -------------------------------------------------------------

HealthCase SandboxCase(std::string phase, Json spec, const Json& vm, const SandboxFacts& f,
                       std::string kstatus, std::string argocd, bool deleting = false) {
  Json obj = Object("Sandbox", "sbx", std::move(spec));
  if (deleting) Deleting(&obj);
  const Json reported = vm.is_null() ? Json::object() : Json{{"vm", vm}};
  obj["status"] = reported;
  Json st = ComputeSandboxStatus(SandboxView::Parse(obj), f, kNow);
  return {"Sandbox", std::move(phase), WithStatus(obj, reported, st), std::move(kstatus),
          std::move(argocd)};
}

void AddSandboxCases(std::vector<HealthCase>* out) {
  const Json spec = {{"templateRef", {{"name", "py"}}}};
  Json suspend = spec;
  suspend["suspend"] = true;
  SandboxFacts unplaced;
  unplaced.schedule_reason = "NoReadyNode";
  unplaced.schedule_message = "no live node has template py ready";
  SandboxFacts placed;
  placed.node = "kvm-1";
  placed.token_secret = "sbx-token";
  placed.token_sha256 = "ab";
  SandboxFacts lost = placed;
  lost.node_lost = "node kvm-1 has not renewed its Lease for 60s";
  const Json running = {{"state", "Running"}, {"endpoint", "10.0.0.1:7443"}};
  const Json suspended = {{"state", "Suspended"}};
  const Json died = {{"state", "Failed"}, {"message", "kubicle-vmm exited: killed by signal 9"}};
  // Before the operator's first pass: the CRD's defaults make status read
  // back as {observedGeneration: 0} (an object with no status at all would
  // be Current to kstatus).
  HealthCase fresh{"Sandbox", "Created (no operator pass yet)", Object("Sandbox", "sbx", spec),
                   "InProgress", "Progressing"};
  fresh.object["status"] = {{"observedGeneration", 0}};
  out->push_back(std::move(fresh));
  out->push_back(SandboxCase("Pending", spec, nullptr, unplaced, "InProgress", "Progressing"));
  out->push_back(SandboxCase("Scheduled", spec, nullptr, placed, "InProgress", "Progressing"));
  out->push_back(SandboxCase("Starting", spec, {{"state", "Restoring"}}, placed, "InProgress",
                             "Progressing"));
  out->push_back(SandboxCase("Running", spec, running, placed, "Current", "Healthy"));
  out->push_back(SandboxCase("Suspending", suspend, running, placed, "InProgress", "Progressing"));
  // kstatus has no "suspended": Ready is False, so it stays InProgress.
  out->push_back(SandboxCase("Suspended", suspend, suspended, placed, "InProgress", "Suspended"));
  out->push_back(SandboxCase("Resuming", spec, suspended, placed, "InProgress", "Progressing"));
  out->push_back(SandboxCase("Failed (VM died)", spec, died, placed, "Failed", "Degraded"));
  out->push_back(SandboxCase("Failed (node lost)", spec, running, lost, "Failed", "Degraded"));
  out->push_back(SandboxCase("Terminating", spec, running, placed, "Terminating", "Progressing", true));
  // A spec change the operator has not computed a status for yet.
  HealthCase stale = SandboxCase("Running, newer spec", spec, running, placed, "InProgress", "Progressing");
  stale.object["metadata"]["generation"] = 2;
  out->push_back(std::move(stale));
}

// --- SandboxTemplate -----------------------------------------------------

HealthCase TemplateCase(std::string phase, Json spec, const Json& entries, std::string kstatus,
                        std::string argocd) {
  Json obj = Object("SandboxTemplate", "py", std::move(spec));
  const Json reported = {{"nodes", entries}};
  obj["status"] = reported;
  std::map<std::string, NodeInfo> nodes;
  nodes["kvm-1"] = NodeInfo{"kvm-1", true, kNow + std::chrono::seconds(30), 100, 0};
  const SandboxTemplateView view = SandboxTemplateView::Parse(obj);
  Json st = ComputeTemplateStatus(view, ValidateTemplate(view), nodes, kNow);
  return {"SandboxTemplate", std::move(phase), WithStatus(obj, reported, st), std::move(kstatus),
          std::move(argocd)};
}

void AddTemplateCases(std::vector<HealthCase>* out) {
  const Json spec = {{"kernel", "/var/lib/kubicle/vmlinux"}, {"rootfs", "/var/lib/kubicle/py.ext4"}};
  auto entry = [](const char* phase, const char* message) {
    Json e = {{"nodeName", "kvm-1"}, {"phase", phase}, {"observedGeneration", 1}};
    if (*message) e["message"] = message;
    return e;
  };
  out->push_back(TemplateCase("Pending (no node yet)", spec, Json::array(), "InProgress", "Progressing"));
  out->push_back(TemplateCase("Pending (baking)", spec, Json::array({entry("Baking", "booting")}), "InProgress",
                              "Progressing"));
  out->push_back(TemplateCase("Ready", spec, Json::array({entry("Ready", "")}), "Current", "Healthy"));
  out->push_back(TemplateCase("Failed (cannot bake)", spec,
                              Json::array({entry("Failed", "kernel /nonexistent/vmlinux: No such file or directory")}),
                              "Failed", "Degraded"));
  out->push_back(TemplateCase("Invalid", {{"kernel", "vmlinux"}, {"rootfs", "/r.ext4"}}, Json::array(),
                              "Failed", "Degraded"));
}

// --- SandboxFork ---------------------------------------------------------

HealthCase ForkCase(std::string phase, const ForkWait& wait, const std::vector<std::string>& child_phases,
                    std::string kstatus, std::string argocd) {
  Json obj = Object("SandboxFork", "f", {{"sourceRef", {{"name", "sbx"}}}, {"replicas", 2}});
  std::vector<Json> children;
  for (size_t i = 0; i < child_phases.size(); ++i) {
    children.push_back({{"metadata", {{"name", "f-" + std::to_string(i)}}},
                        {"status", {{"phase", child_phases[i]}}}});
  }
  const std::string node = wait.reason.empty() ? "kvm-1" : "";
  Json st = ComputeForkStatus(SandboxForkView::Parse(obj), node, wait, children, kNow);
  return {"SandboxFork", std::move(phase), WithStatus(obj, nullptr, st), std::move(kstatus),
          std::move(argocd)};
}

void AddForkCases(std::vector<HealthCase>* out) {
  out->push_back(ForkCase("Pending (no source yet)", {"SourceNotFound", ""}, {}, "InProgress",
                          "Progressing"));
  out->push_back(ForkCase("Forking", {}, {"Running", "Starting"}, "InProgress", "Progressing"));
  out->push_back(ForkCase("Ready", {}, {"Running", "Running"}, "Current", "Healthy"));
  out->push_back(ForkCase("Failed (a child failed)", {}, {"Running", "Failed"}, "Failed", "Degraded"));
  out->push_back(ForkCase("Pending (name taken)", {"NameConflict", "Sandbox f-0 exists and is not owned by this fork"},
                          {}, "Failed", "Degraded"));
  out->push_back(ForkCase("Pending (invalid spec)", {"InvalidSpec", "spec.replicas: expected an integer"}, {},
                          "Failed", "Degraded"));
}

// --- Workspace -----------------------------------------------------------

HealthCase WorkspaceCase(std::string phase, const Json& disk, const WorkspaceFacts& f, std::string kstatus,
                         std::string argocd, bool deleting = false) {
  Json obj = Object("Workspace", "ws", {{"sizeMiB", 64}});
  if (deleting) Deleting(&obj);
  const Json reported = disk.is_null() ? Json::object() : Json{{"disk", disk}};
  obj["status"] = reported;
  Json st = ComputeWorkspaceStatus(WorkspaceView::Parse(obj), f, kNow);
  return {"Workspace", std::move(phase), WithStatus(obj, reported, st), std::move(kstatus),
          std::move(argocd)};
}

void AddWorkspaceCases(std::vector<HealthCase>* out) {
  WorkspaceFacts unplaced;
  unplaced.schedule_reason = "NoLiveNode";
  unplaced.schedule_message = "no live node";
  WorkspaceFacts placed;
  placed.node = "kvm-1";
  placed.token_secret = "ws-workspace-token";
  placed.token_sha256 = "ab";
  WorkspaceFacts lost = placed;
  lost.node_lost = "node kvm-1 has not renewed its Lease for 60s";
  const Json ready = {{"state", "Ready"}, {"bytesUsed", 4096}};
  out->push_back(WorkspaceCase("Pending (unscheduled)", nullptr, unplaced, "InProgress", "Progressing"));
  out->push_back(WorkspaceCase("Pending (provisioning)", nullptr, placed, "InProgress", "Progressing"));
  out->push_back(WorkspaceCase("Ready", ready, placed, "Current", "Healthy"));
  out->push_back(WorkspaceCase("Failed (disk)", {{"state", "Failed"}, {"message", "mkfs: no space left on device"}},
                               placed, "Failed", "Degraded"));
  out->push_back(WorkspaceCase("Failed (node lost)", ready, lost, "Failed", "Degraded"));
  out->push_back(WorkspaceCase("Terminating", ready, placed, "Terminating", "Progressing", true));
}

}  // namespace

std::vector<HealthCase> HealthCases() {
  std::vector<HealthCase> out;
  AddSandboxCases(&out);
  AddTemplateCases(&out);
  AddForkCases(&out);
  AddWorkspaceCases(&out);
  return out;
}

Json HealthCaseJson(const HealthCase& c) {
  return Json{{"kind", c.kind}, {"phase", c.phase}, {"object", c.object}, {"kstatus", c.kstatus},
              {"argocd", c.argocd}};
}

}  // namespace kubicle::op
