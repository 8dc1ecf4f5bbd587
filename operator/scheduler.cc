#include "operator/scheduler.h"

#include <algorithm>

namespace kubicle::op {

Result<std::string> PickNode(const PlacementRequest& req,
                             const std::map<std::string, NodeInfo>& nodes,
                             const std::map<std::string, NodeLoad>& load) {
  std::string best;
  int64_t best_count = 0;
  bool any_ready = false;
  std::vector<std::string> ready = req.ready_nodes;
  std::sort(ready.begin(), ready.end());
  for (const std::string& name : ready) {
    auto it = nodes.find(name);
    if (it == nodes.end() || !it->second.alive) continue;
    any_ready = true;
    const NodeInfo& n = it->second;
    NodeLoad l = load.count(name) ? load.at(name) : NodeLoad{};
    if (l.sandboxes + 1 > n.capacity_sandboxes) continue;
    if (n.capacity_memory_mib > 0 && l.memory_mib + req.memory_mib > n.capacity_memory_mib) {
      continue;
    }
    if (best.empty() || l.sandboxes < best_count) {
      best = name;
      best_count = l.sandboxes;
    }
  }
  if (!best.empty()) return best;
  if (!any_ready) return Status::NotFound("no live node has the template ready");
  return Status::ResourceExhausted("every node with the template ready is full");
}

Result<std::string> Scheduler::Place(const std::string& sandbox_key, const PlacementRequest& req,
                                     const std::map<std::string, NodeInfo>& nodes,
                                     std::map<std::string, NodeLoad> load,
                                     const std::vector<std::string>& placed_keys) {
  std::lock_guard lock(mu_);
  for (const std::string& k : placed_keys) assumed_.erase(k);
  assumed_.erase(sandbox_key);
  for (const auto& [key, a] : assumed_) {
    load[a.node].sandboxes += 1;
    load[a.node].memory_mib += a.memory_mib;
  }
  ASSIGN_OR_RETURN(std::string node, PickNode(req, nodes, load));
  assumed_[sandbox_key] = Assumed{node, req.memory_mib};
  return node;
}

void Scheduler::Forget(const std::string& sandbox_key) {
  std::lock_guard lock(mu_);
  assumed_.erase(sandbox_key);
}

}  // namespace kubicle::op
