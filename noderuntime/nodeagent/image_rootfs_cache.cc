#include "noderuntime/nodeagent/image_rootfs_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "common/log.h"
#include "common/sha256.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;

constexpr char kSha256Prefix[] = "sha256:";
constexpr char kBuilding[] = ".building-";

std::string RandomSuffix() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

// fsync the file and its directory around the rename: after a crash the
// final name holds the complete image or nothing.
Status Commit(const std::string& tmp, const std::string& final_path, const std::string& dir) {
  {
    UniqueFd f(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f || ::fsync(f.get()) != 0) return Status::FromErrno("fsync " + tmp);
  }
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Status::FromErrno("rename " + tmp);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) return Status::FromErrno("fsync " + dir);
  return Status::Ok();
}

bool IsRegularNonEmpty(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

}  // namespace

ImageRootfsCache::ImageRootfsCache(std::string dir, int format, std::unique_ptr<ImagePuller> puller,
                                   RootfsBuildFn build)
    : dir_(std::move(dir)),
      suffix_("-v" + std::to_string(format) + ".ext4"),
      puller_(std::move(puller)),
      build_(std::move(build)) {}

std::string ImageRootfsCache::FinalPath(const std::string& hex) const { return dir_ + "/" + hex + suffix_; }

std::string ImageRootfsCache::DigestOfPath(const std::string& path) const {
  // <dir>/<64 hex>-v<digits>.ext4, any format: a node template baked before
  // an upgrade still names its older file.
  const std::string prefix = dir_ + "/";
  if (path.rfind(prefix, 0) != 0 || path.size() < prefix.size() + 64 + 7 || !path.ends_with(".ext4")) return "";
  const std::string hex = path.substr(prefix.size(), 64);
  const std::string version = path.substr(prefix.size() + 64, path.size() - prefix.size() - 64 - 5);
  if (!IsSha256Hex(hex) || version.size() < 3 || version.rfind("-v", 0) != 0) return "";
  for (size_t i = 2; i < version.size(); ++i) {
    if (version[i] < '0' || version[i] > '9') return "";
  }
  return kSha256Prefix + hex;
}

Result<ImageRootfs> ImageRootfsCache::Resolve(const std::string& reference, const ProgressFn& progress) {
  std::shared_lock gc(gc_mu_);
  ASSIGN_OR_RETURN(oci::PulledImage image, puller_->Pull(reference, progress));
  const std::string& digest = image.manifest_digest;
  const std::string hex = digest.rfind(kSha256Prefix, 0) == 0 ? digest.substr(7) : "";
  // The digest names a file below: it must be exactly what it claims.
  if (!IsSha256Hex(hex)) return Status::Internal("image " + reference + ": bad manifest digest \"" + digest + "\"");
  RETURN_IF_ERROR(BuildOnce(image, hex, progress));
  return ImageRootfs{FinalPath(hex), digest};
}

Status ImageRootfsCache::BuildOnce(const oci::PulledImage& image, const std::string& hex,
                                   const ProgressFn& progress) {
  const std::string final_path = FinalPath(hex);
  std::shared_ptr<Build> build;
  {
    std::unique_lock l(mu_);
    if (auto it = builds_.find(hex); it != builds_.end()) {
      build = it->second;
      build_done_.wait(l, [&] { return build->done; });
      return build->status;
    }
    // Only this class renames into place, and only complete files.
    if (IsRegularNonEmpty(final_path)) return Status::Ok();
    build = std::make_shared<Build>();
    builds_[hex] = build;
  }
  Status st = RunBuild(image, final_path, progress);
  {
    std::lock_guard l(mu_);
    build->status = st;
    build->done = true;
    builds_.erase(hex);
  }
  build_done_.notify_all();
  return st;
}

Status ImageRootfsCache::RunBuild(const oci::PulledImage& image, const std::string& final_path,
                                  const ProgressFn& progress) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::Internal("cannot create " + dir_ + ": " + ec.message());
  const std::string tmp = final_path + kBuilding + RandomSuffix();
  if (progress) progress("building the root filesystem of " + image.manifest_digest);
  log::Info("building an image root filesystem",
            {{"image", image.reference}, {"digest", image.manifest_digest}, {"layers", std::to_string(image.layers.size())}});
  Status st = build_(image, tmp, progress);
  if (st.ok() && !IsRegularNonEmpty(tmp)) st = Status::Internal("the rootfs build wrote no file " + tmp);
  if (st.ok()) st = Commit(tmp, final_path, dir_);
  if (!st.ok()) fs::remove(tmp, ec);
  return st;
}

Status ImageRootfsCache::Collect(const std::set<std::string>& keep_manifest_digests) {
  std::unique_lock gc(gc_mu_);  // no build runs from here on
  std::error_code ec;
  uint64_t freed = 0;
  size_t removed = 0;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string path = e.path().string();
    const std::string digest = DigestOfPath(path);
    const bool stale_build = path.find(kBuilding) != std::string::npos;
    if (!stale_build && (digest.empty() || keep_manifest_digests.count(digest))) continue;
    std::error_code size_ec;
    const uint64_t size = e.is_regular_file(size_ec) ? e.file_size(size_ec) : 0;
    if (fs::remove(e.path(), size_ec)) {
      freed += size;
      ++removed;
    }
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return Status::Internal("cannot list " + dir_ + ": " + ec.message());
  }
  if (removed) log::Info("collected image root filesystems", {{"files", std::to_string(removed)},
                                                              {"bytes", std::to_string(freed)}});
  return puller_->CollectGarbage(keep_manifest_digests);
}

}  // namespace kubicle::noderuntime::nodeagent
