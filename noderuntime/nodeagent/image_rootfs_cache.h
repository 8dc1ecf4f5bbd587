// ImageRootfsCache: a SandboxTemplate's spec.image as a root filesystem the
// node can bake (docs/node.md, "Templates from container images"). The
// image is pulled (ImagePuller: the node's oci::ImageStore) and its layers
// built into an ext4 image (RootfsBuildFn: oci::BuildRootfs) once per
// manifest digest and rootfs format, then kept while a template uses it.
//
// Layout of `dir` (created on demand; this class is its only writer):
//   <hex>-v<format>.ext4                 a complete root filesystem of the
//                                        image whose manifest digest is
//                                        sha256:<hex>
//   <hex>-v<format>.ext4.building-<rnd>  a build in progress
//
// Contracts:
// - Resolve pulls every time, so a tag re-resolves (a digest reference needs
//   no network once stored: ImageStore's contract), then returns the built
//   file of the manifest digest, building it when absent. A file reaches its
//   final name only by rename after the build succeeded and was fsynced: a
//   crash leaves at most a .building- file, never a half-built image under
//   the final name. A failed build leaves nothing.
// - Concurrent Resolves of one digest build once: the others wait and share
//   the result, or its error.
// - Collect(keep) removes the built files whose digest is not in `keep`
//   (manifest digests, "sha256:<hex>") and the .building- files no running
//   build holds (a crashed run's), then has the puller collect the layers
//   and manifests no kept image names. It waits for running Resolves, and
//   Resolves wait for it.
// - DigestOfPath is pure: the digest a built file in `dir` stands for (of
//   any format), "" for any other path (a hand-built rootfs), so a node
//   template's disk says which image it holds after a restart or upgrade.
//   Collect keeps every format of a kept digest and leaves files it did not
//   name alone.
// - `progress` (may be empty) gets the puller's messages and then
//   "building the root filesystem of <digest>"; never after Resolve returns.
// - Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>

#include "common/status.h"
#include "noderuntime/nodeagent/image_resolver.h"
#include "noderuntime/oci/image.h"

namespace kubicle::noderuntime::nodeagent {

// The registry side as the cache needs it (oci::ImageStore in the node;
// fakes in tests).
class ImagePuller {
 public:
  virtual ~ImagePuller() = default;
  virtual Result<oci::PulledImage> Pull(const std::string& reference, const ProgressFn& progress) = 0;
  virtual Status CollectGarbage(const std::set<std::string>& keep_manifest_digests) = 0;
};

// Writes the root filesystem of `image` to `out_path` (a new file). A
// failure may leave a partial file there; the cache removes it.
using RootfsBuildFn =
    std::function<Status(const oci::PulledImage& image, const std::string& out_path, const ProgressFn& progress)>;

struct ImageRootfs {
  std::string path;             // absolute; attached read-only by the VMM
  std::string manifest_digest;  // "sha256:<hex>": status.nodes[].imageDigest
};

class ImageRootfsCache {
 public:
  // `format` names the rootfs layout (and the agent files in it): a new
  // format builds anew instead of using an older file.
  ImageRootfsCache(std::string dir, int format, std::unique_ptr<ImagePuller> puller, RootfsBuildFn build);

  [[nodiscard]] Result<ImageRootfs> Resolve(const std::string& reference, const ProgressFn& progress);
  [[nodiscard]] Status Collect(const std::set<std::string>& keep_manifest_digests);
  std::string DigestOfPath(const std::string& path) const;
  const std::string& dir() const { return dir_; }

 private:
  struct Build {  // one build in progress, shared by its leader and waiters
    bool done = false;
    Status status;
  };
  std::string FinalPath(const std::string& hex) const;
  Status BuildOnce(const oci::PulledImage& image, const std::string& hex, const ProgressFn& progress);
  Status RunBuild(const oci::PulledImage& image, const std::string& final_path, const ProgressFn& progress);

  const std::string dir_;
  const std::string suffix_;  // "-v<format>.ext4"
  std::unique_ptr<ImagePuller> puller_;
  RootfsBuildFn build_;
  std::shared_mutex gc_mu_;  // Resolves shared, Collect exclusive
  std::mutex mu_;
  std::condition_variable build_done_;
  std::map<std::string, std::shared_ptr<Build>> builds_;  // by hex; guarded by mu_
};

}  // namespace kubicle::noderuntime::nodeagent
