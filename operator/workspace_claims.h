// One writer per Workspace, decided by the operator before placement: the
// Sandbox that may be placed with a workspace. The informer cache shows
// placements (label kubicle.dev/node) only after their write comes back
// through the watch, so two workers deciding at once from the same cache
// would both see the workspace free. A claim, taken before the placement
// write and kept until the cache shows it (or the claimant is gone, or its
// write failed), closes that window, as the scheduler's assumed placements
// do for capacity. In memory only: after an operator restart the cache is
// fresh from a list, which shows every placement already made.
// Thread-safe (reconcile workers share it).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>

namespace kubicle::op {

class WorkspaceClaims {
 public:
  // Claims `workspace_key` ("ns/name") for `sandbox_key` unless another
  // Sandbox holds a claim and `exists(holder)` (its object is still in the
  // cache). Returns "" when claimed, else the holder's key.
  std::string Claim(const std::string& workspace_key, const std::string& sandbox_key,
                    const std::function<bool(const std::string&)>& exists);
  // Drops every claim of `sandbox_key` (placement failed, or it is gone).
  void Release(const std::string& sandbox_key);

 private:
  std::mutex mu_;
  std::map<std::string, std::string> holder_;  // workspace key -> sandbox key
};

}  // namespace kubicle::op
