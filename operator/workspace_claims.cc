#include "operator/workspace_claims.h"

namespace kubicle::op {

std::string WorkspaceClaims::Claim(const std::string& workspace_key, const std::string& sandbox_key,
                                   const std::function<bool(const std::string&)>& exists) {
  std::lock_guard lock(mu_);
  auto it = holder_.find(workspace_key);
  if (it != holder_.end() && it->second != sandbox_key && exists(it->second)) return it->second;
  holder_[workspace_key] = sandbox_key;
  return "";
}

void WorkspaceClaims::Release(const std::string& sandbox_key) {
  std::lock_guard lock(mu_);
  for (auto it = holder_.begin(); it != holder_.end();) {
    it = it->second == sandbox_key ? holder_.erase(it) : std::next(it);
  }
}

}  // namespace kubicle::op
