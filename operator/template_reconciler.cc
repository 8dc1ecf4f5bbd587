#include "operator/template_reconciler.h"

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
}  // namespace

std::vector<std::string> ValidateTemplate(const Json& tmpl) {
  std::vector<std::string> problems;
  const Json spec = tmpl.value("spec", Json::object());
  for (const char* f : {"kernel", "rootfs", "initrd"}) {
    if (!spec.contains(f)) continue;
    std::string v = spec[f].get<std::string>();
    if ((std::string(f) != "initrd" || !v.empty()) && !ValidSource(v)) {
      problems.push_back(std::string("spec.") + f + " must be an absolute path or an http(s)/file/oci URL: \"" + v + "\"");
    }
  }
  int i = 0;
  for (const Json& w : spec.value("warmup", Json::array())) {
    const Json cmd = w.value("command", Json::array());
    if (cmd.empty() || cmd[0].get<std::string>().empty()) {
      problems.push_back("spec.warmup[" + std::to_string(i) + "].command[0] must name a program");
    }
    ++i;
  }
  return problems;
}

Json ComputeTemplateStatus(const Json& tmpl, const std::vector<std::string>& problems,
                           const std::map<std::string, NodeInfo>& nodes, kube::TimePoint now) {
  const int64_t gen = Generation(tmpl);
  int ready = 0, failed = 0, live = 0;
  if (tmpl.contains("status") && tmpl["status"].contains("nodes")) {
    for (const Json& e : tmpl["status"]["nodes"]) {
      auto it = nodes.find(e.value("nodeName", ""));
      if (it == nodes.end() || !it->second.alive) continue;
      if (e.value("observedGeneration", int64_t{0}) != gen) continue;
      ++live;
      if (e.value("phase", "") == "Ready") ++ready;
      if (e.value("phase", "") == "Failed") ++failed;
    }
  }
  std::string joined;
  for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
  Json conds = tmpl.contains("status") ? tmpl["status"].value("conditions", Json::array())
                                       : Json::array();
  conds = SetCondition(conds, problems.empty() ? Condition{"Valid", "True", "Valid", "spec accepted"}
                                               : Condition{"Valid", "False", "InvalidSpec", joined},
                       gen, now);
  std::string phase = !problems.empty()            ? "Invalid"
                      : ready > 0                  ? "Ready"
                      : live > 0 && failed == live ? "Failed"
                                                   : "Pending";
  Condition rc = phase == "Ready" ? Condition{"Ready", "True", "Baked",
                                              std::to_string(ready) + " nodes ready"}
                 : phase == "Invalid" ? Condition{"Ready", "False", "InvalidSpec", joined}
                 : phase == "Failed"  ? Condition{"Ready", "False", "BakeFailed", "every node failed to bake it"}
                                      : Condition{"Ready", "False", "Baking", "no node has baked it yet"};
  conds = SetCondition(conds, rc, gen, now);
  return Json{{"observedGeneration", gen}, {"phase", phase}, {"readyNodes", ready},
              {"conditions", conds}};
}

Result<Outcome> TemplateReconciler::Reconcile(const std::string& key) {
  std::optional<Json> got = ctx_.lister->Get(kube::SandboxTemplateResource(), key);
  if (!got || IsDeleting(*got)) return Outcome{};
  const kube::TimePoint now = ctx_.clock->Now();
  auto nodes = NodesFromLeases(ctx_.lister->List(kube::LeaseResource()), now);
  Json desired = ComputeTemplateStatus(*got, ValidateTemplate(*got), nodes, now);
  RETURN_IF_ERROR(WriteStatusIfChanged(ctx_, kube::SandboxTemplateResource(), *got, desired).status());
  Outcome out;
  for (const auto& [name, n] : nodes) {
    if (n.alive) out.RequeueWithin(n.expires - now);
  }
  return out;
}

}  // namespace kubicle::op
