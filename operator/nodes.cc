#include "operator/nodes.h"

#include "kube/time_format.h"

namespace kubicle::op {
namespace {
int64_t AnnotationInt(const Json& obj, std::string_view key) {
  const Json& md = obj["metadata"];
  if (!md.contains("annotations")) return 0;
  std::string v = md["annotations"].value(std::string(key), "");
  try {
    return v.empty() ? 0 : std::stoll(v);
  } catch (const std::exception&) {
    return 0;  // a malformed report counts as no capacity
  }
}
}  // namespace

std::optional<NodeInfo> ParseNodeLease(const Json& lease, kube::TimePoint now) {
  std::string node = Label(lease, kLabelNode);
  if (node.empty()) return std::nullopt;
  NodeInfo n;
  n.name = node;
  const Json spec = lease.value("spec", Json::object());
  auto renew = kube::ParseTime(spec.value("renewTime", ""));
  if (renew.ok()) {
    n.expires = *renew + std::chrono::seconds(spec.value("leaseDurationSeconds", 40));
    n.alive = spec.value("holderIdentity", "") == node && now < n.expires;
  }
  n.capacity_sandboxes = AnnotationInt(lease, kAnnotationCapacitySandboxes);
  n.capacity_memory_mib = AnnotationInt(lease, kAnnotationCapacityMemory);
  return n;
}

std::map<std::string, NodeInfo> NodesFromLeases(const std::vector<Json>& leases,
                                                kube::TimePoint now) {
  std::map<std::string, NodeInfo> out;
  for (const Json& l : leases) {
    if (auto n = ParseNodeLease(l, now)) out[n->name] = *n;
  }
  return out;
}

std::vector<std::string> TemplateReadyNodes(const Json& tmpl) {
  std::vector<std::string> out;
  if (!tmpl.contains("status") || !tmpl["status"].contains("nodes")) return out;
  int64_t gen = Generation(tmpl);
  for (const Json& e : tmpl["status"]["nodes"]) {
    if (e.value("phase", "") == "Ready" && e.value("observedGeneration", int64_t{0}) == gen) {
      out.push_back(e.value("nodeName", ""));
    }
  }
  return out;
}

}  // namespace kubicle::op
