// ImageStore: the node's OCI image cache. Pulls an image reference from its
// registry into a layer store keyed by digest and hands the rootfs side a
// PulledImage (image.h) whose every blob is verified. docs/images.md.
//
// Layout under `dir` (created by Open):
//   blobs/sha256/<hex>       verified blobs (layers and configs), read-only:
//                            a file reaches this name only by rename after
//                            its sha256 and size matched
//   manifests/sha256/<hex>   platform manifests (and indexes) as received
//   partial/<hex>.partial    an in-flight download (resumed by the next Pull)
//   partial/<hex>.lock       flock'd while a download of <hex> runs
//
// Contracts:
// - Pull: a tag is resolved at the registry on every call; a digest is used
//   as is (a stored manifest needs no network). linux/amd64 is chosen from
//   an index. The image's size (sum of layer sizes, from the manifest) over
//   max_image_bytes is ResourceExhausted before any layer is fetched. Blobs
//   already in blobs/ are not fetched again; a blob being fetched by another
//   Pull (this process or another, through the .lock flock) is waited for,
//   not fetched twice. A transfer cut short is resumed (Range) within the
//   Pull, up to 3 attempts while each makes progress. The whole Pull is
//   bounded by `timeout`.
// - A crash leaves at most a .partial file, never a half-written blob under
//   its final name; the next Pull resumes it with a Range request.
// - `progress` is called about once a second from the pulling thread (and
//   cpprestsdk threads) while layers download, never after Pull returns.
// - CollectGarbage removes manifests not in `keep_manifest_digests`, blobs
//   no kept manifest names, .partial files no download holds and lock files
//   a crash left; it returns the bytes freed. Pulls and collections in this
//   process exclude each other (a collection waits for running Pulls); one
//   ImageStore per directory per node.
// - Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/image.h"

namespace kubicle::noderuntime::oci {

struct ImageStoreOptions {
  std::string dir;
  std::string docker_config_path;                // credentials (config.json), or empty
  std::vector<std::string> insecure_registries;  // host[:port] pulled over plain http
  std::string ca_file;                           // extra trusted CA (PEM), or empty
  uint64_t max_image_bytes = 8ull << 30;         // sum of an image's layers
  std::chrono::seconds timeout{1800};            // one whole Pull
};

// "pulling reg/x:1: 120 MiB of 512 MiB (23%)", about once a second.
using PullProgressFn = std::function<void(const std::string& message)>;

class RegistryClient;
struct Descriptor;
struct ImageReference;

class ImageStore {
 public:
  // Creates the layout; reads the docker config and checks the CA file.
  static Result<std::unique_ptr<ImageStore>> Open(ImageStoreOptions options);
  ~ImageStore();

  // Resolves the reference (a tag re-resolves every call; a digest is used
  // as is), fetches what is missing, verifies every blob.
  Result<PulledImage> Pull(const std::string& reference, const PullProgressFn& progress);

  // Removes blobs not referenced by any image in keep (manifest digests);
  // returns bytes freed.
  Result<uint64_t> CollectGarbage(const std::set<std::string>& keep_manifest_digests);

  // Blobs (layers and configs) fetched from registries since Open, and the
  // body bytes the completing attempt received for them (a resumed download
  // counts only its remainder): what tests and benchmarks check a cached
  // Pull against.
  struct FetchStats {
    uint64_t blobs = 0;
    uint64_t bytes = 0;
  };
  FetchStats fetch_stats() const { return {blobs_fetched_.load(), bytes_fetched_.load()}; }

 private:
  struct PullState;
  ImageStore(ImageStoreOptions options, std::unique_ptr<RegistryClient> client);
  Result<std::string> Resolve(const ImageReference& ref, PullState& state);
  Result<std::string> EnsureBlob(const ImageReference& ref, const Descriptor& blob,
                                 PullState& state);
  std::string BlobPath(const std::string& digest) const;
  std::string ManifestPath(const std::string& digest) const;

  const ImageStoreOptions options_;
  std::unique_ptr<RegistryClient> client_;
  std::shared_mutex gc_mu_;  // Pulls shared, CollectGarbage exclusive
  std::atomic<uint64_t> blobs_fetched_{0};
  std::atomic<uint64_t> bytes_fetched_{0};
};

}  // namespace kubicle::noderuntime::oci
