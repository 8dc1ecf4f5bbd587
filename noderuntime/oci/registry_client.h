// RegistryClient: the OCI distribution API v2, read side — manifests and
// blobs of one registry's repositories, authenticated as the registry asks.
//
// Contracts:
// - https with the system CAs (plus `ca_file`), unless the registry host is
//   listed in `insecure_registries`: then plain http. Nothing else decides
//   the scheme.
// - Auth: every request goes out anonymous or with the Authorization last
//   obtained for that registry and repository; a 401 is answered once from
//   its WWW-Authenticate: Bearer (GET the realm for a pull token, with Basic
//   credentials when the credentials name the registry) or Basic (the
//   credentials, or PermissionDenied when there are none). A second 401 is
//   PermissionDenied. A token realm on http is refused for an https
//   registry (credentials never go out in clear text unless the registry
//   itself is listed insecure).
// - GetManifest: the body is capped at kMaxManifestBytes (before and while
//   reading); its sha256 is the manifest's digest, and must equal the
//   reference when a digest was asked for, and the Docker-Content-Digest
//   header when the registry sent one (DataLoss otherwise).
// - FetchBlob: streams the blob into `partial_path`, appending to what a
//   previous attempt left there (Range request; a 200 reply restarts from
//   zero), hashing on the fly. More bytes than the descriptor's size:
//   ResourceExhausted. Fewer: Unavailable, the partial file is kept for the
//   next attempt. A digest mismatch: DataLoss and the partial file is
//   removed. On OK the file holds exactly the verified blob, fsynced, and
//   the result is the bytes received (the blob's size less what was
//   resumed).
// - Status codes: 404 NotFound, 401/403 PermissionDenied, others Unavailable;
//   deadlines DeadlineExceeded. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "noderuntime/oci/manifest.h"
#include "noderuntime/oci/reference.h"
#include "noderuntime/oci/registry_auth.h"
#include "noderuntime/oci/registry_http.h"

namespace kubicle::noderuntime::oci {

struct RegistryClientOptions {
  CredentialMap credentials;
  std::vector<std::string> insecure_registries;  // host[:port], plain http
  std::string ca_file;
  int max_redirects = 5;
};

struct FetchedManifest {
  std::string digest;  // sha256:<hex> of body
  std::string body;
  ParsedManifest parsed;
};

// bytes of this blob on disk so far (including a resumed prefix).
using BlobProgressFn = std::function<void(uint64_t bytes)>;

class RegistryClient {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  explicit RegistryClient(RegistryClientOptions options) : options_(std::move(options)) {}

  [[nodiscard]] Result<FetchedManifest> GetManifest(const ImageReference& image,
                                                    const std::string& ref, Deadline deadline);
  [[nodiscard]] Result<uint64_t> FetchBlob(const ImageReference& image, const Descriptor& blob,
                                           const std::string& partial_path, Deadline deadline,
                                           const BlobProgressFn& progress);

 private:
  // GET <base>/<path> with auth; a 2xx body to `sink`. Returns the final
  // response, non-2xx statuses turned into errors.
  Result<HttpGetResponse> Get(const ImageReference& image, const std::string& path,
                              HttpHeaders headers, uint64_t max_body, Deadline deadline,
                              BodySink& sink);
  Result<std::string> Authorize(const ImageReference& image, const std::string& challenge,
                                Deadline deadline);
  std::string BaseUrl(const ImageReference& image) const;
  bool Insecure(const std::string& registry) const;

  const RegistryClientOptions options_;
  std::mutex mu_;
  std::map<std::string, std::string> authorization_;  // "registry/repository" -> header value
};

}  // namespace kubicle::noderuntime::oci
