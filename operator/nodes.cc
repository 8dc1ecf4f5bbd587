#include "operator/nodes.h"

#include <charconv>

#include "kube/json_fields.h"
#include "kube/time_format.h"

namespace kubicle::op {
namespace {
int64_t AnnotationInt(const Json& obj, std::string_view key) {
  const std::string v = kube::StrAt(obj, {"metadata", "annotations", key});
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  // A malformed (or negative) report counts as no capacity.
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || n < 0) return 0;
  return n;
}
}  // namespace

std::optional<NodeInfo> ParseNodeLease(const Json& lease, kube::TimePoint now) {
  std::string node = Label(lease, kLabelNode);
  if (node.empty()) return std::nullopt;
  NodeInfo n;
  n.name = node;
  const Json& spec = kube::At(lease, {"spec"});
  auto renew = kube::ParseTime(kube::StrAt(spec, {"renewTime"}));
  int64_t duration = kube::IntAt(spec, {"leaseDurationSeconds"}, 40);
  if (duration < 0 || duration > 366 * 86400) duration = 40;  // nonsense: the protocol's default
  if (renew.ok()) {
    n.expires = *renew + std::chrono::seconds(duration);
    n.alive = kube::StrAt(spec, {"holderIdentity"}) == node && now < n.expires;
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

std::vector<std::string> TemplateReadyNodes(const SandboxTemplateView& tmpl) {
  std::vector<std::string> out;
  for (const TemplateNodeEntry& e : tmpl.status.nodes) {
    if (e.phase == "Ready" && e.observed_generation == tmpl.meta.generation) {
      out.push_back(e.node_name);
    }
  }
  return out;
}

kube::TimePoint LeaseAbsence::MissingSince(const std::string& node, kube::TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  return missing_since_.try_emplace(node, now).first->second;
}

void LeaseAbsence::Seen(const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  missing_since_.erase(node);
}

NodeStanding StandingOf(const std::string& node, const std::map<std::string, NodeInfo>& nodes,
                        LeaseAbsence* absence, kube::TimePoint now, kube::Duration grace) {
  NodeStanding st;
  auto it = nodes.find(node);
  if (it != nodes.end()) {
    absence->Seen(node);
    st.has_lease = true;
    st.alive = it->second.alive;
    st.expired_at = it->second.expires;
  } else {
    st.expired_at = absence->MissingSince(node, now);
  }
  st.gone_at = st.expired_at + grace;
  return st;
}

}  // namespace kubicle::op
