// ImageResolver: turns a SandboxTemplate's `kernel`, `initrd` and `rootfs`
// (docs/api.md, SandboxTemplate spec) into local files the node agent can
// hand to kubicle-vmm when it bakes the template.
//
// Sources:
//   /abs/path, file:///abs/path  a regular file inside one of the node's image
//                                roots (`kubicle-node serve --image-root DIR`);
//                                the path is taken literally (no %-decoding)
//   http://..., https://...      downloaded once per node into cache_dir as
//                                `<cache_dir>/<sha256>`; sha256 is required
//   oci://...                    Unimplemented for now
//
// Contracts:
// - A returned path is absolute, free of symlinks, and names a regular file;
//   a local one lies inside the realpath of an image root. This is checked at
//   Resolve time, so it holds for the VMM's later open only while the roots
//   are writable by the node's administrator alone.
// - Every error names the field and the source, e.g.
//   `kernel "/etc/shadow" is outside the node's image roots (/var/lib/kubicle/images)`:
//     InvalidArgument     empty or unsupported source, relative path, a `..`
//                         component, not a regular file, a malformed sha256,
//                         an http(s) source without a sha256
//     PermissionDenied    outside the image roots (before or after symlinks)
//     NotFound            the local file does not exist
//     FailedPrecondition  sha256 mismatch (both digests in the message), or
//                         no cache_dir for an http(s) source
//     Unavailable         HTTP status other than 200, connection failure,
//                         more than 5 redirects
//     ResourceExhausted   more than max_download_bytes, disk full
//     DeadlineExceeded    the download took longer than download_timeout
//     Unimplemented       oci://
// - Roots must be absolute; relative ones are ignored (with a warning), and
//   ones that do not exist (yet) are skipped at each Resolve. Local files are
//   hashed on every Resolve that gives a sha256.
// - Downloads stream into `<cache_dir>/<sha256>.partial-<random>` (never the
//   whole body in memory), are hashed on the fly, and are fsynced and renamed
//   to `<cache_dir>/<sha256>` only when the digest matches; a failed download
//   leaves no file behind. A non-empty `<cache_dir>/<sha256>` is used without
//   re-hashing: this class is its only writer, and one process owns cache_dir
//   (stale `.partial-` files of a crashed run are removed on the next
//   download of the same sha256).
// - Thread-safe. Concurrent Resolve calls for the same sha256 download once;
//   the others wait and then use the cached file (or return the same error
//   when they asked for the same URL).
// - `progress` may be empty. It is called from the calling thread or from a
//   cpprestsdk thread, never concurrently for one Resolve and never after
//   Resolve returns, at most about once a second while downloading plus once
//   at the end; it should not block. Messages look like
//   `downloading rootfs: 120 MiB of 512 MiB (23%)`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace kubicle::noderuntime::nodeagent {

struct ImageSource {
  std::string field;   // "kernel", "initrd" or "rootfs": names the source in messages
  std::string source;  // the spec value
  std::string sha256;  // lowercase hex, or empty (required for http(s))
};

struct ImageResolverOptions {
  std::vector<std::string> roots;  // absolute directories local sources must lie in
  std::string cache_dir;           // where http(s) downloads are kept; created on demand
  uint64_t max_download_bytes = 16ull << 30;
  std::chrono::seconds download_timeout{1800};  // the whole download, redirects included
};

using ProgressFn = std::function<void(const std::string& message)>;

class ImageResolver {
 public:
  explicit ImageResolver(ImageResolverOptions opts);

  // Returns an absolute local path to a regular file (see the contracts
  // above). Concurrent calls for the same URL download it once.
  [[nodiscard]] Result<std::string> Resolve(const ImageSource& src, const ProgressFn& progress);

 private:
  struct Root {
    std::string lexical;  // as configured, lexically normalised
    std::string real;     // realpath, empty while the directory is missing
  };
  // A download in progress, shared by its leader and the waiters.
  struct Flight {
    std::string url;
    bool done = false;
    Status status;
  };

  Result<std::string> ResolveLocal(const ImageSource& src, const std::string& path) const;
  Result<std::string> ResolveHttp(const ImageSource& src, const ProgressFn& progress);
  Status Download(const ImageSource& src, const std::string& dir, const std::string& final_path,
                  const ProgressFn& progress);
  std::vector<Root> LiveRoots() const;
  std::string RootsForMessage() const;
  Result<std::string> CacheDir(const ImageSource& src) const;

  const ImageResolverOptions opts_;
  std::vector<std::string> roots_;  // the absolute ones of opts_.roots

  std::mutex mu_;
  std::condition_variable flight_done_;
  std::map<std::string, std::shared_ptr<Flight>> flights_;  // by sha256; guarded by mu_
};

}  // namespace kubicle::noderuntime::nodeagent
