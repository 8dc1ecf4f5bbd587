#include "operator/template_reconciler.h"

#include "operator/run_token.h"

namespace kubicle::op {

namespace {
bool ValidSource(const std::string& s) {
  if (s.empty()) return false;
  if (s[0] == '/') return s.find("/../") == std::string::npos && !s.ends_with("/..");
  for (const char* scheme : {"http://", "https://", "file:///", "oci://"}) {
    if (s.starts_with(scheme)) return s.size() > std::string(scheme).size();
  }
  return false;
}

// The apiserver's pattern holds the reference's grammar; this catches what
// matters if it was bypassed (a CRD without the schema, an old object): a
// registry host always named, so no node ever completes a reference to a
// registry nobody chose. The node parses it fully before any pull.
std::string ImageProblem(const std::string& image) {
  const std::string field = "spec.image \"" + image + "\"";
  if (image.empty() || image.size() > 512) return field + " must be 1..512 characters";
  for (char c : image) {
    if (c <= ' ' || c == 0x7f) return field + " must not contain spaces or control characters";
  }
  if (image.find("://") != std::string::npos) return field + " is an image reference, not a URL";
  const size_t slash = image.find('/');
  const std::string host = image.substr(0, slash);
  if (slash == std::string::npos || slash + 1 == image.size() ||
      (host != "localhost" && host.find_first_of(".:") == std::string::npos)) {
    return field + " must name its registry host (host.domain[:port]/repository[:tag][@sha256:...])";
  }
  return "";
}
}  // namespace

std::vector<std::string> ValidateTemplate(const SandboxTemplateView& tmpl) {
  std::vector<std::string> problems = tmpl.problems;
  const SandboxTemplateSpec& spec = tmpl.spec;
  if (spec.image.has_value() == spec.rootfs.has_value()) {
    problems.push_back("exactly one of spec.image and spec.rootfs is required");
  }
  if (spec.image) {
    if (std::string p = ImageProblem(*spec.image); !p.empty()) problems.push_back(p);
  }
  for (const auto& [f, v] : {std::pair{"kernel", &spec.kernel}, std::pair{"rootfs", &spec.rootfs},
                             std::pair{"initrd", &spec.initrd}}) {
    if (!*v) continue;
    if ((std::string(f) != "initrd" || !(*v)->empty()) && !ValidSource(**v)) {
      problems.push_back(std::string("spec.") + f + " must be an absolute path or an http(s)/file/oci URL: \"" + **v + "\"");
    }
  }
  for (size_t i = 0; i < spec.warmup.size(); ++i) {
    const std::vector<std::string>& cmd = spec.warmup[i].command;
    if (cmd.empty() || cmd[0].empty()) {
      problems.push_back("spec.warmup[" + std::to_string(i) + "].command[0] must name a program");
    }
  }
  return problems;
}

Json ComputeTemplateStatus(const SandboxTemplateView& tmpl, const std::vector<std::string>& problems,
                           const std::map<std::string, NodeInfo>& nodes, kube::TimePoint now) {
  const int64_t gen = tmpl.meta.generation;
  int ready = 0, failed = 0, live = 0;
  std::string failures;  // "node: message; ..." so a pipeline sees why
  for (const TemplateNodeEntry& e : tmpl.status.nodes) {
    auto it = nodes.find(e.node_name);
    if (it == nodes.end() || !it->second.alive) continue;
    if (e.observed_generation != gen) continue;
    ++live;
    if (e.phase == "Ready") ++ready;
    if (e.phase != "Failed") continue;
    ++failed;
    failures += (failures.empty() ? "" : "; ") + e.node_name + ": " +
                (e.message.empty() ? "bake failed" : e.message);
  }
  const std::string joined = JoinProblems(problems);
  Json conds = SetCondition(tmpl.status.conditions,
                            problems.empty() ? Condition{"Valid", "True", "Valid", "spec accepted"}
                                             : Condition{"Valid", "False", "InvalidSpec", joined},
                            gen, now);
  std::string phase = !problems.empty()            ? "Invalid"
                      : ready > 0                  ? "Ready"
                      : live > 0 && failed == live ? "Failed"
                                                   : "Pending";
  Condition rc = phase == "Ready" ? Condition{"Ready", "True", "Baked",
                                              std::to_string(ready) + " nodes ready"}
                 : phase == "Invalid" ? Condition{"Ready", "False", "InvalidSpec", joined}
                 : phase == "Failed"  ? Condition{"Ready", "False", "BakeFailed",
                                                 "every node failed to bake it: " + failures}
                                      : Condition{"Ready", "False", "Baking", "no node has baked it yet"};
  conds = SetCondition(conds, rc, gen, now);
  // Invalid and Failed wait for a new spec (or a node that bakes it):
  // Stalled, so a pipeline fails at once with the reason.
  const Progress progress = phase == "Ready"   ? Progress::kSettled
                            : phase == "Pending" ? Progress::kWorking
                                                 : Progress::kStalled;
  conds = SetProgress(conds, progress, rc, gen, now);
  return Json{{"observedGeneration", gen}, {"phase", phase}, {"readyNodes", ready},
              {"conditions", conds}};
}

Result<Outcome> TemplateReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(kube::SandboxTemplateResource(), key);
  if (!got || IsDeleting(*got)) return Outcome{};
  const SandboxTemplateView tmpl = SandboxTemplateView::Parse(std::move(*got));
  const kube::TimePoint now = ctx_.clock->Now();
  auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now);
  Json desired = ComputeTemplateStatus(tmpl, ValidateTemplate(tmpl), nodes, now);
  // A Secret the API would not give or take now must not hold back the
  // nodes' readiness: the rest of status is written, the pass retried.
  auto run_token = EnsureRunToken(ctx_, tmpl);
  if (run_token.ok()) AddRunTokenStatus(*run_token, tmpl, now, &desired);
  ASSIGN_OR_RETURN(bool wrote,
                   WriteStatusIfChanged(ctx_, kube::SandboxTemplateResource(), tmpl.object, desired));
  if (!run_token.ok()) return run_token.status();
  if (wrote && !run_token->problem.empty())
    ctx_.Event(tmpl.object, "Warning", run_token->problem_reason, run_token->problem);
  Outcome out;
  for (const auto& [name, n] : nodes) {
    if (n.alive) out.RequeueWithin(n.expires - now);
  }
  return out;
}

}  // namespace kubicle::op
