// Placement of a Sandbox: among live nodes where its template is Ready and
// which have room (sandbox count and memory), the least loaded one (spread:
// each VM gets more of its node's page cache and CPU), ties by name. Pure.
// Scheduler adds "assumed" placements on top of the informer cache, as
// kube-scheduler does, so back-to-back decisions never overfill a node
// before the cache has seen the previous label writes.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "operator/nodes.h"

namespace kubicle::op {

struct PlacementRequest {
  std::vector<std::string> ready_nodes;  // template Ready there
  int64_t memory_mib = 0;
};

// NotFound: no live node has the template ready; ResourceExhausted: all full.
Result<std::string> PickNode(const PlacementRequest& req,
                             const std::map<std::string, NodeInfo>& nodes,
                             const std::map<std::string, NodeLoad>& load);

class Scheduler {
 public:
  // `load` is what the cache shows; `placed_keys` the Sandbox keys it
  // already shows on a node (their assumptions are dropped).
  Result<std::string> Place(const std::string& sandbox_key, const PlacementRequest& req,
                            const std::map<std::string, NodeInfo>& nodes,
                            std::map<std::string, NodeLoad> load,
                            const std::vector<std::string>& placed_keys);
  void Forget(const std::string& sandbox_key);

 private:
  struct Assumed {
    std::string node;
    int64_t memory_mib;
  };
  std::mutex mu_;
  std::map<std::string, Assumed> assumed_;
};

}  // namespace kubicle::op
