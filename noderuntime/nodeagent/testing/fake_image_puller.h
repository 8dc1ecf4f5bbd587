// FakeImagePuller: the registry side of ImageRootfsCache for tests. It
// resolves references by a table the test edits (a tag that moves is a new
// entry) and records what a collection was told to keep. Test-only.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include "noderuntime/nodeagent/image_rootfs_cache.h"

namespace kubicle::noderuntime::nodeagent::testing {

inline std::string FakeDigest(char c) { return "sha256:" + std::string(64, c); }

class FakeImagePuller final : public ImagePuller {
 public:
  void Set(const std::string& reference, const std::string& digest) {
    std::lock_guard l(mu_);
    digests_[reference] = digest;
  }
  std::set<std::string> collected_keep() {
    std::lock_guard l(mu_);
    return collected_keep_;
  }
  int collections() {
    std::lock_guard l(mu_);
    return collections_;
  }
  int pulls() {
    std::lock_guard l(mu_);
    return pulls_;
  }

  // Unavailable for a reference not in the table (a registry that is down).
  Result<oci::PulledImage> Pull(const std::string& reference, const ProgressFn& progress) override {
    std::string digest;
    {
      std::lock_guard l(mu_);
      ++pulls_;
      auto it = digests_.find(reference);
      if (it == digests_.end()) return Status::Unavailable("registry down for " + reference);
      digest = it->second;
    }
    if (progress) progress("pulling " + reference);
    return oci::PulledImage{.reference = reference, .manifest_digest = digest};
  }
  Status CollectGarbage(const std::set<std::string>& keep) override {
    std::lock_guard l(mu_);
    collected_keep_ = keep;
    ++collections_;
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> digests_;  // reference -> manifest digest
  std::set<std::string> collected_keep_;
  int collections_ = 0;
  int pulls_ = 0;
};

}  // namespace kubicle::noderuntime::nodeagent::testing
