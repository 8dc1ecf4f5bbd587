#include "noderuntime/oci/registry_client.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/query_escape.h"
#include "common/sha256.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::oci {
namespace {

constexpr uint64_t kMaxTokenBytes = 1 << 20;

Status FromHttpStatus(const std::string& what, const HttpGetResponse& r) {
  std::string line = what + ": HTTP " + std::to_string(r.status) + " " + r.reason.substr(0, 100);
  if (r.status == 404) return Status::NotFound(line);
  if (r.status == 401 || r.status == 403) return Status::PermissionDenied(line);
  return Status::Unavailable(line);
}

// Streams a blob into a file, hashing as it goes; resumes after `offset`
// bytes already there (and already hashed into `hash`).
class FileSink : public BodySink {
 public:
  FileSink(int fd, uint64_t offset, uint64_t limit, Sha256& hash, const BlobProgressFn& progress)
      : fd_(fd), offset_(offset), limit_(limit), hash_(hash), progress_(progress) {}

  Status Begin(int status, const std::map<std::string, std::string>& headers) override {
    if (status == 206) {
      // "bytes <first>-<last>/<size>": only a continuation from offset_ is usable.
      auto it = headers.find("content-range");
      std::string want = "bytes " + std::to_string(offset_) + "-";
      if (it == headers.end() || it->second.rfind(want, 0) != 0)
        return Status::Unavailable("a 206 reply whose Content-Range is not \"" + want + "...\"");
      return Status::Ok();
    }
    // A full body: start over.
    (void)hash_.Final();
    offset_ = 0;
    if (::ftruncate(fd_, 0) != 0) return Status::FromErrno("truncating the partial blob");
    return Status::Ok();
  }

  Status Write(const uint8_t* p, size_t n) override {
    if (offset_ + n > limit_)
      return Status::ResourceExhausted("the blob is bigger than its descriptor's " +
                                       std::to_string(limit_) + " bytes");
    for (size_t done = 0; done < n;) {
      ssize_t w = ::pwrite(fd_, p + done, n - done, static_cast<off_t>(offset_ + done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::FromErrno("writing the partial blob");
      done += static_cast<size_t>(w);
    }
    hash_.Update({p, n});
    offset_ += n;
    if (progress_) progress_(offset_);
    return Status::Ok();
  }
  uint64_t offset() const { return offset_; }

 private:
  const int fd_;
  uint64_t offset_;
  const uint64_t limit_;
  Sha256& hash_;
  const BlobProgressFn& progress_;
};

// Hashes the first `n` bytes of fd (a previous attempt's prefix).
Status HashPrefix(int fd, uint64_t n, Sha256& hash) {
  std::vector<uint8_t> buf(1 << 20);
  for (uint64_t off = 0; off < n;) {
    ssize_t r =
        ::pread(fd, buf.data(), std::min<uint64_t>(buf.size(), n - off), static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return Status::FromErrno("reading the partial blob", r == 0 ? EIO : errno);
    hash.Update({buf.data(), static_cast<size_t>(r)});
    off += static_cast<uint64_t>(r);
  }
  return Status::Ok();
}

// The token a Bearer realm answers with: {"token": ...} or {"access_token": ...}.
Result<std::string> ParseToken(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    for (const char* key : {"token", "access_token"}) {
      auto it = j.find(key);
      if (it != j.end() && it->is_string() && !it->get_ref<const std::string&>().empty())
        return it->get<std::string>();
    }
  }
  return Status::PermissionDenied("the token endpoint's reply has no token");
}

}  // namespace

bool RegistryClient::Insecure(const std::string& registry) const {
  const auto& l = options_.insecure_registries;
  return std::find(l.begin(), l.end(), registry) != l.end();
}

std::string RegistryClient::BaseUrl(const ImageReference& image) const {
  return std::string(Insecure(image.registry) ? "http://" : "https://") + image.registry + "/v2/" +
         image.repository + "/";
}

Result<std::string> RegistryClient::Authorize(const ImageReference& image,
                                              const std::string& header, Deadline deadline) {
  ASSIGN_OR_RETURN(Challenge c, ParseChallenge(header));
  auto cred = options_.credentials.find(image.registry);
  const Credentials* creds = cred == options_.credentials.end() ? nullptr : &cred->second;
  if (c.scheme == Challenge::Scheme::kBasic) {
    if (!creds)
      return Status::PermissionDenied(
          "registry " + image.registry +
          " asks for basic auth and the docker config has no credentials for it");
    return BasicAuthorization(*creds);
  }
  const bool realm_https = c.realm.rfind("https://", 0) == 0;
  if (!realm_https && !(c.realm.rfind("http://", 0) == 0 && Insecure(image.registry)))
    return Status::PermissionDenied("registry " + image.registry + ": refusing token realm \"" +
                                    c.realm.substr(0, 200) +
                                    "\" (https only, unless the registry is insecure)");
  std::string scope = c.scope.empty() ? "repository:" + image.repository + ":pull" : c.scope;
  std::string url = c.realm + (c.realm.find('?') == std::string::npos ? "?" : "&") +
                    "scope=" + QueryEscape(scope);
  if (!c.service.empty()) url += "&service=" + QueryEscape(c.service);
  HttpHeaders headers;
  if (creds) headers.emplace_back("Authorization", BasicAuthorization(*creds));
  HttpGetOptions o{deadline, kMaxTokenBytes, options_.max_redirects, options_.ca_file};
  StringSink sink;
  ASSIGN_OR_RETURN(HttpGetResponse r, HttpGet(url, headers, o, sink));
  if (r.status != 200) return FromHttpStatus("token from " + c.realm.substr(0, 200), r);
  ASSIGN_OR_RETURN(std::string token, ParseToken(sink.body()));
  return "Bearer " + token;
}

Result<HttpGetResponse> RegistryClient::Get(const ImageReference& image, const std::string& path,
                                            HttpHeaders headers, uint64_t max_body,
                                            Deadline deadline, BodySink& sink) {
  const std::string key = image.registry + "/" + image.repository;
  const std::string url = BaseUrl(image) + path;
  HttpGetOptions o{deadline, max_body, options_.max_redirects, options_.ca_file};
  for (int attempt = 0;; ++attempt) {
    HttpHeaders h = headers;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto it = authorization_.find(key); it != authorization_.end())
        h.emplace_back("Authorization", it->second);
    }
    ASSIGN_OR_RETURN(HttpGetResponse r, HttpGet(url, h, o, sink));
    if (r.status == 200 || r.status == 206) return r;
    if (r.status != 401 || attempt > 0) return FromHttpStatus("GET " + url, r);
    std::string challenge = r.Header("www-authenticate");
    if (challenge.empty()) return FromHttpStatus("GET " + url + " (no WWW-Authenticate)", r);
    Result<std::string> auth = Authorize(image, challenge, deadline);
    if (!auth.ok()) return auth.status().WithContext("GET " + url);
    std::lock_guard<std::mutex> l(mu_);
    authorization_[key] = *auth;
  }
}

Result<FetchedManifest> RegistryClient::GetManifest(const ImageReference& image,
                                                    const std::string& ref, Deadline deadline) {
  StringSink sink;
  ASSIGN_OR_RETURN(HttpGetResponse r, Get(image, "manifests/" + ref, {{"Accept", ManifestAccept()}},
                                          kMaxManifestBytes, deadline, sink));
  FetchedManifest m;
  m.body = sink.body();
  m.digest = "sha256:" + Sha256Hex(m.body);
  const std::string what = "manifest " + image.registry + "/" + image.repository + ":" + ref;
  if (IsSha256Digest(ref) && m.digest != ref)
    return Status::DataLoss(what + ": the body's digest is " + m.digest);
  std::string header = r.Header("docker-content-digest");
  if (!header.empty() && header.rfind("sha256:", 0) == 0 && header != m.digest)
    return Status::DataLoss(what + ": Docker-Content-Digest " + header.substr(0, 100) +
                            " but the body's digest is " + m.digest);
  Result<ParsedManifest> parsed = ParseManifest(m.body, r.Header("content-type"));
  if (!parsed.ok()) return parsed.status().WithContext(what);
  m.parsed = std::move(*parsed);
  return m;
}

Result<uint64_t> RegistryClient::FetchBlob(const ImageReference& image, const Descriptor& blob,
                                           const std::string& partial_path, Deadline deadline,
                                           const BlobProgressFn& progress) {
  UniqueFd fd(::open(partial_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::FromErrno("opening " + partial_path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::FromErrno("stat " + partial_path);
  uint64_t have = static_cast<uint64_t>(st.st_size);
  if (have > blob.size) {
    if (::ftruncate(fd.get(), 0) != 0) return Status::FromErrno("truncating " + partial_path);
    have = 0;
  }
  Sha256 hash;
  RETURN_IF_ERROR(HashPrefix(fd.get(), have, hash));
  FileSink sink(fd.get(), have, blob.size, hash, progress);
  uint64_t received = 0;
  if (have < blob.size) {
    HttpHeaders headers;
    if (have > 0) headers.emplace_back("Range", "bytes=" + std::to_string(have) + "-");
    Result<HttpGetResponse> r =
        Get(image, "blobs/" + blob.digest, headers, blob.size, deadline, sink);
    if (!r.ok()) {
      if (r.status().code() == StatusCode::kResourceExhausted) ::unlink(partial_path.c_str());
      return r.status().WithContext("blob " + blob.digest);
    }
    received = r->body_bytes;
  }
  if (sink.offset() != blob.size)
    return Status::Unavailable("blob " + blob.digest + ": the body ended after " +
                               std::to_string(sink.offset()) + " of " + std::to_string(blob.size) +
                               " bytes");
  if ("sha256:" + hash.FinalHex() != blob.digest) {
    ::unlink(partial_path.c_str());
    return Status::DataLoss("blob " + blob.digest + ": the bytes received have another digest");
  }
  if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + partial_path);
  return received;
}

}  // namespace kubicle::noderuntime::oci
