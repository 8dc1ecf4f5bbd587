#include "noderuntime/oci/image_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/file_io.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "noderuntime/oci/blob_lock.h"
#include "noderuntime/oci/manifest.h"
#include "noderuntime/oci/reference.h"
#include "noderuntime/oci/registry_client.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string Hex(const std::string& digest) { return digest.substr(7); }  // after "sha256:"

std::string MiB(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

Status FsyncDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid() || ::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + dir);
  return Status::Ok();
}

// Writes `data` to `path` through a temporary name of its own (concurrent
// Pulls may write the same manifest), so a reader (or a crash) sees the
// whole file or none.
Status WriteAtomically(const std::string& path, const std::string& data) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return Status::FromErrno("creating " + tmp);
    RETURN_IF_ERROR(WriteAllAt(fd.get(), 0, data.data(), data.size()));
    if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::FromErrno("renaming " + tmp);
  return FsyncDir(fs::path(path).parent_path());
}

constexpr int kFetchAttempts = 3;

// The size of a file, 0 when it is absent.
uint64_t FileBytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// A verified blob of the expected size is present under its final name.
bool HaveBlob(const std::string& path, uint64_t size) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == size;
}

}  // namespace

// One Pull's progress: bytes of layers present (cached or done) plus the
// running download's, reported at most once a second.
struct ImageStore::PullState {
  std::string name;
  Clock::time_point deadline;
  const PullProgressFn* progress = nullptr;
  uint64_t total = 0;
  std::atomic<uint64_t> done{0};  // written by the pulling thread, read by cpprestsdk's
  std::mutex mu;
  Clock::time_point last_report{};

  void Report(uint64_t current) {
    if (!progress || !*progress || total == 0) return;
    std::lock_guard<std::mutex> l(mu);
    auto now = Clock::now();
    if (now - last_report < std::chrono::seconds(1)) return;
    last_report = now;
    uint64_t have = std::min(total, done + current);
    (*progress)("pulling " + name + ": " + MiB(have) + " of " + MiB(total) + " (" +
                std::to_string(have * 100 / total) + "%)");
  }
};

ImageStore::ImageStore(ImageStoreOptions options, std::unique_ptr<RegistryClient> client)
    : options_(std::move(options)), client_(std::move(client)) {}
ImageStore::~ImageStore() = default;

Result<std::unique_ptr<ImageStore>> ImageStore::Open(ImageStoreOptions options) {
  if (options.dir.empty()) return Status::InvalidArgument("image store: no directory");
  for (const char* sub : {"blobs/sha256", "manifests/sha256", "partial"}) {
    std::error_code ec;
    fs::create_directories(fs::path(options.dir) / sub, ec);
    if (ec)
      return Status::Internal("image store: creating " + options.dir + "/" + sub + ": " +
                              ec.message());
  }
  if (!options.ca_file.empty() && ::access(options.ca_file.c_str(), R_OK) != 0)
    return Status::FromErrno("image store: CA file " + options.ca_file);
  RegistryClientOptions ro;
  ASSIGN_OR_RETURN(ro.credentials, LoadDockerConfig(options.docker_config_path));
  ro.insecure_registries = options.insecure_registries;
  ro.ca_file = options.ca_file;
  auto client = std::make_unique<RegistryClient>(std::move(ro));
  return std::unique_ptr<ImageStore>(new ImageStore(std::move(options), std::move(client)));
}

std::string ImageStore::BlobPath(const std::string& digest) const {
  return options_.dir + "/blobs/sha256/" + Hex(digest);
}
std::string ImageStore::ManifestPath(const std::string& digest) const {
  return options_.dir + "/manifests/sha256/" + Hex(digest);
}

// The platform manifest's body for `ref`, stored under manifests/.
Result<std::string> ImageStore::Resolve(const ImageReference& ref, PullState& state) {
  std::string want = ref.ManifestRef();
  for (int depth = 0; depth < 2; ++depth) {
    std::string body, digest;
    if (IsSha256Digest(want)) {
      // A digest names its bytes: a stored copy that still hashes to it is as
      // good as the registry's.
      Result<std::string> stored = ReadFileToString(ManifestPath(want), kMaxManifestBytes);
      if (stored.ok() && "sha256:" + Sha256Hex(*stored) == want) {
        body = std::move(*stored);
        digest = want;
      }
    }
    ParsedManifest parsed;
    if (digest.empty()) {
      ASSIGN_OR_RETURN(FetchedManifest m, client_->GetManifest(ref, want, state.deadline));
      // Content-addressed: a stored file of that name already holds these bytes.
      if (::access(ManifestPath(m.digest).c_str(), F_OK) != 0)
        RETURN_IF_ERROR(WriteAtomically(ManifestPath(m.digest), m.body));
      body = std::move(m.body);
      digest = std::move(m.digest);
      parsed = std::move(m.parsed);
    } else {
      ASSIGN_OR_RETURN(parsed, ParseManifest(body, ""));
    }
    if (!parsed.is_index) return digest;
    if (depth == 1) return Status::InvalidArgument("image index " + want + " names another index");
    ASSIGN_OR_RETURN(Descriptor d, ChoosePlatform(parsed));
    want = d.digest;
  }
  return Status::Internal("unreachable");
}

Result<std::string> ImageStore::EnsureBlob(const ImageReference& ref, const Descriptor& blob,
                                           PullState& state) {
  const std::string path = BlobPath(blob.digest);
  if (HaveBlob(path, blob.size)) return path;
  const std::string partial = options_.dir + "/partial/" + Hex(blob.digest);
  ASSIGN_OR_RETURN(BlobLock lock, BlobLock::Acquire(partial + ".lock", state.deadline));
  if (HaveBlob(path, blob.size)) return path;  // another Pull fetched it meanwhile
  // A transfer cut short (Unavailable) keeps what it received in .partial:
  // the next attempt asks only for the rest. It is retried while attempts
  // make progress, so one dropped connection does not fail a long pull, but
  // a registry that fails the same way each time (a redirect loop, a refused
  // connection) is not asked again here; other errors are final.
  Result<uint64_t> fetched = Status::Internal("no attempt");
  for (int attempt = 0; attempt < kFetchAttempts; ++attempt) {
    const uint64_t before = FileBytes(partial + ".partial");
    fetched = client_->FetchBlob(ref, blob, partial + ".partial", state.deadline,
                                 [&state](uint64_t bytes) { state.Report(bytes); });
    if (fetched.ok() || fetched.status().code() != StatusCode::kUnavailable ||
        FileBytes(partial + ".partial") <= before || Clock::now() >= state.deadline)
      break;
  }
  if (!fetched.ok()) return fetched.status();
  const uint64_t received = *fetched;
  ++blobs_fetched_;
  bytes_fetched_ += received;
  if (::rename((partial + ".partial").c_str(), path.c_str()) != 0)
    return Status::FromErrno("storing blob " + blob.digest);
  // Read-only from here on: a stored blob is immutable (its name is its
  // digest). After the rename, so a crash never leaves a .partial the next
  // attempt cannot open for writing.
  if (::chmod(path.c_str(), 0444) != 0) return Status::FromErrno("chmod blob " + blob.digest);
  RETURN_IF_ERROR(FsyncDir(options_.dir + "/blobs/sha256"));
  return path;
}

Result<PulledImage> ImageStore::Pull(const std::string& reference, const PullProgressFn& progress) {
  ASSIGN_OR_RETURN(ImageReference ref, ParseImageReference(reference));
  std::shared_lock<std::shared_mutex> gc(gc_mu_);
  PullState state;
  state.name = ref.ToString();
  state.deadline = Clock::now() + options_.timeout;
  state.progress = &progress;

  ASSIGN_OR_RETURN(std::string digest, Resolve(ref, state));
  ASSIGN_OR_RETURN(std::string body, ReadFileToString(ManifestPath(digest), kMaxManifestBytes));
  ASSIGN_OR_RETURN(ParsedManifest manifest, ParseManifest(body, ""));

  PulledImage out;
  out.reference = reference;
  out.manifest_digest = digest;
  for (const Descriptor& l : manifest.layers) {
    // Compared before adding, so a hostile size cannot wrap the sum.
    if (l.size > options_.max_image_bytes - out.total_bytes)
      return Status::ResourceExhausted("image " + state.name +
                                       ": its layers are more than the limit of " +
                                       MiB(options_.max_image_bytes) + " (the manifest's sizes)");
    out.total_bytes += l.size;
  }
  state.total = out.total_bytes;

  if (manifest.config.size > kMaxConfigBytes)
    return Status::ResourceExhausted("image " + state.name + ": config of " +
                                     std::to_string(manifest.config.size) +
                                     " bytes is over the limit");
  ASSIGN_OR_RETURN(std::string config_path, EnsureBlob(ref, manifest.config, state));
  ASSIGN_OR_RETURN(std::string config, ReadFileToString(config_path, kMaxConfigBytes));
  Result<ImageConfig> parsed_config = ParseImageConfig(config);
  if (!parsed_config.ok()) return parsed_config.status().WithContext("image " + state.name);
  out.config = std::move(*parsed_config);

  for (const Descriptor& l : manifest.layers) {
    Result<std::string> path = EnsureBlob(ref, l, state);
    if (!path.ok()) return path.status().WithContext("image " + state.name);
    state.done += l.size;
    out.layers.push_back({l.digest, l.media_type, l.size, *path});
  }
  return out;
}

Result<uint64_t> ImageStore::CollectGarbage(const std::set<std::string>& keep_manifest_digests) {
  std::unique_lock<std::shared_mutex> gc(gc_mu_);
  std::set<std::string> keep_blobs;  // hex
  std::set<std::string> keep_manifests;
  for (const std::string& digest : keep_manifest_digests) {
    if (!IsSha256Digest(digest)) continue;
    Result<std::string> body = ReadFileToString(ManifestPath(digest), kMaxManifestBytes);
    if (!body.ok()) continue;  // not stored: nothing of it to keep
    Result<ParsedManifest> m = ParseManifest(*body, "");
    if (!m.ok() || m->is_index) continue;
    keep_manifests.insert(Hex(digest));
    keep_blobs.insert(Hex(m->config.digest));
    for (const Descriptor& l : m->layers) keep_blobs.insert(Hex(l.digest));
  }
  uint64_t freed = 0;
  auto sweep = [&](const std::string& dir, const std::set<std::string>& keep) -> Status {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (keep.count(name)) continue;
      uint64_t size = e.is_regular_file(ec) ? e.file_size(ec) : 0;
      if (::unlink(e.path().c_str()) != 0)
        return Status::FromErrno("removing " + e.path().string());
      freed += size;
    }
    if (ec) return Status::Internal("listing " + dir + ": " + ec.message());
    return Status::Ok();
  };
  RETURN_IF_ERROR(sweep(options_.dir + "/manifests/sha256", keep_manifests));
  RETURN_IF_ERROR(sweep(options_.dir + "/blobs/sha256", keep_blobs));
  // Partial downloads no Pull is running (their lock is free), and lock
  // files a crash left behind (taking a free lock and dropping it removes
  // its file). Listed first: taking a lock creates and removes files.
  std::error_code ec;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(options_.dir + "/partial", ec))
    entries.push_back(e.path());
  for (const fs::path& p : entries) {
    if (p.extension() != ".partial" && p.extension() != ".lock") continue;
    fs::path lock_path = p;
    lock_path.replace_extension(".lock");
    ASSIGN_OR_RETURN(std::optional<BlobLock> lock, BlobLock::TryAcquire(lock_path.string()));
    if (!lock || p.extension() != ".partial") continue;
    uint64_t size = fs::file_size(p, ec);
    if (::unlink(p.c_str()) == 0) freed += ec ? 0 : size;
  }
  return freed;
}

}  // namespace kubicle::noderuntime::oci
