#include "noderuntime/nodeagent/image_resolver.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <utility>

#include "common/log.h"
#include "common/unique_fd.h"
#include "noderuntime/nodeagent/http_download.h"
#include "common/sha256.h"

namespace kubicle::noderuntime::nodeagent {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kMaxRedirects = 5;
constexpr char kSupported[] =
    "use an absolute path under an image root, a file:/// URL, or an http(s) URL with a sha256";
constexpr char kOciUnsupported[] =
    "oci:// images are not supported yet by kubicle-node; use a path under an image root or an "
    "http(s) URL with a sha256";

// The value as it appears in messages: quoted, control bytes escaped (it
// comes from a user's spec and ends up in status and logs).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string Describe(const ImageSource& src) { return src.field + " " + Quote(src.source); }

// The lowercased scheme of "scheme://...", or "" when there is none.
std::string SchemeOf(const std::string& s) {
  size_t colon = s.find("://");
  if (colon == std::string::npos || colon == 0) return "";
  std::string scheme;
  for (size_t i = 0; i < colon; ++i) {
    char c = s[i];
    bool ok = std::isalpha(static_cast<unsigned char>(c)) ||
              (i > 0 && (std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' ||
                         c == '.'));
    if (!ok) return "";
    scheme += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return scheme;
}

bool HasDotDot(const std::string& path) {
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, "..") == 0 && end - start == 2) return true;
    start = end + 1;
  }
  return false;
}

std::string Normal(const std::string& path) {
  std::string n = fs::path(path).lexically_normal().string();
  while (n.size() > 1 && n.back() == '/') n.pop_back();
  return n;
}

bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          path[root.size()] == '/');
}

const char* FileTypeName(mode_t m) {
  if (S_ISDIR(m)) return "directory";
  if (S_ISCHR(m)) return "character device";
  if (S_ISBLK(m)) return "block device";
  if (S_ISFIFO(m)) return "named pipe";
  if (S_ISSOCK(m)) return "socket";
  return "special file";
}

Result<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return Status::FromErrno("realpath " + path);
  return std::string(buf);
}

std::string RandomSuffix() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

std::string FormatBytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(n) / (1ull << 30));
  } else if (n >= (1ull << 20)) {
    std::snprintf(buf, sizeof buf, "%llu MiB", static_cast<unsigned long long>(n >> 20));
  } else if (n >= (1ull << 10)) {
    std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>(n >> 10));
  } else {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  }
  return buf;
}

// Turns the downloader's per-chunk callbacks into at most one message a
// second (the first chunk always reports, so short downloads show up too).
class ProgressReporter {
 public:
  ProgressReporter(std::string field, const ProgressFn& fn) : field_(std::move(field)), fn_(fn) {}

  void Report(uint64_t bytes, uint64_t total) {
    if (!fn_) return;
    std::lock_guard<std::mutex> l(mu_);
    Clock::time_point now = Clock::now();
    if (reported_ && now - last_ < std::chrono::seconds(1)) return;
    reported_ = true;
    last_ = now;
    std::string m = "downloading " + field_ + ": " + FormatBytes(bytes);
    if (total > 0) {
      m += " of " + FormatBytes(total) + " (" + std::to_string(bytes * 100 / total) + "%)";
    }
    fn_(m);
  }

 private:
  const std::string field_;
  const ProgressFn& fn_;
  std::mutex mu_;
  bool reported_ = false;
  Clock::time_point last_;
};

// true: a finished download is cached at `path`.
Result<bool> IsCached(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return false;
    return Status::FromErrno("stat " + path);
  }
  if (!S_ISREG(st.st_mode))
    return Status::FailedPrecondition("image cache entry " + path + " is not a regular file");
  return st.st_size > 0;
}

// Partial files of this sha256 left by a process that died mid-download.
void RemoveStalePartials(const std::string& dir, const std::string& sha256) {
  const std::string prefix = sha256 + ".partial-";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove(e.path(), ec);
  }
}

// fsync the data, rename into place, fsync the directory: after a crash the
// cache holds either nothing or the complete verified file.
Status CommitFile(int fd, const std::string& tmp, const std::string& final_path,
                  const std::string& dir) {
  if (::fsync(fd) != 0) return Status::FromErrno("fsync " + tmp);
  if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Status::FromErrno("rename " + tmp);
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d || ::fsync(d.get()) != 0) return Status::FromErrno("fsync " + dir);
  return Status::Ok();
}

}  // namespace

ImageResolver::ImageResolver(ImageResolverOptions opts) : opts_(std::move(opts)) {
  for (const std::string& r : opts_.roots) {
    if (r.empty() || r[0] != '/') {
      log::Warn("image root ignored: not an absolute path", {{"root", r}});
      continue;
    }
    roots_.push_back(r);
  }
}

Result<std::string> ImageResolver::Resolve(const ImageSource& src, const ProgressFn& progress) {
  const std::string& s = src.source;
  if (s.empty()) return Status::InvalidArgument(src.field + " is empty; " + kSupported);
  if (s.find('\0') != std::string::npos)
    return Status::InvalidArgument(Describe(src) + " contains a NUL byte");
  const std::string scheme = SchemeOf(s);
  if (scheme.empty()) {
    if (s[0] == '/') return ResolveLocal(src, s);
    return Status::InvalidArgument(Describe(src) + " is not an absolute path or a URL; " +
                                   kSupported);
  }
  if (scheme == "file") {
    std::string path = s.substr(scheme.size() + 3);
    if (path.empty() || path[0] != '/') {
      return Status::InvalidArgument(Describe(src) +
                                     " names a host; file URLs look like file:///absolute/path");
    }
    return ResolveLocal(src, path);
  }
  if (scheme == "http" || scheme == "https") return ResolveHttp(src, progress);
  if (scheme == "oci") return Status::Unimplemented(kOciUnsupported);
  return Status::InvalidArgument(Describe(src) + " has the unsupported scheme " + scheme + "://; " +
                                 kSupported);
}

Result<std::string> ImageResolver::ResolveLocal(const ImageSource& src,
                                                const std::string& path) const {
  const std::string what = Describe(src);
  if (HasDotDot(path)) return Status::InvalidArgument(what + " has a \"..\" component");
  if (!src.sha256.empty() && !IsSha256Hex(src.sha256)) {
    return Status::InvalidArgument(src.field + " sha256 " + Quote(src.sha256) +
                                   " is not 64 lowercase hex digits");
  }
  const std::string outside =
      what + " is outside the node's image roots (" + RootsForMessage() + ")";
  const std::vector<Root> roots = LiveRoots();

  // Checked before touching the file system, so that a spec cannot probe
  // which files exist elsewhere on the node.
  const std::string lexical = Normal(path);
  bool named_inside = false;
  for (const Root& r : roots) named_inside |= Under(lexical, r.lexical) || Under(lexical, r.real);
  if (!named_inside) return Status::PermissionDenied(outside);

  Result<std::string> real = RealPath(path);
  if (!real.ok()) {
    int err = real.status().error_number();
    if (err == ENOENT || err == ENOTDIR)
      return Status::NotFound(what + " does not exist on this node");
    return real.status().WithContext(src.field);
  }
  bool inside = false;
  for (const Root& r : roots) inside |= Under(*real, r.real);
  if (!inside) return Status::PermissionDenied(outside + ": it resolves to " + *real);

  struct stat st;
  if (::stat(real->c_str(), &st) != 0) return Status::FromErrno("stat " + *real).WithContext(what);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(what + " is not a regular file (it is a " +
                                   FileTypeName(st.st_mode) + ")");
  }
  if (!src.sha256.empty()) {
    Result<std::string> digest = Sha256FileHex(*real);
    if (!digest.ok()) return digest.status().WithContext(what);
    if (*digest != src.sha256) {
      return Status::FailedPrecondition(what + ": sha256 mismatch: expected " + src.sha256 +
                                        ", got " + *digest);
    }
  }
  return std::move(real).value();
}

Result<std::string> ImageResolver::ResolveHttp(const ImageSource& src, const ProgressFn& progress) {
  const std::string what = Describe(src);
  if (src.sha256.empty()) {
    return Status::InvalidArgument(what + " is an http(s) URL, which needs a sha256 (spec." +
                                   src.field + "Sha256)");
  }
  if (!IsSha256Hex(src.sha256)) {
    return Status::InvalidArgument(src.field + " sha256 " + Quote(src.sha256) +
                                   " is not 64 lowercase hex digits");
  }
  ASSIGN_OR_RETURN(const std::string dir, CacheDir(src));
  const std::string final_path = dir + "/" + src.sha256;

  for (;;) {
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      Result<bool> cached = IsCached(final_path);
      if (!cached.ok()) return cached.status().WithContext(what);
      if (*cached) return final_path;
      auto it = flights_.find(src.sha256);
      if (it == flights_.end()) {
        flight = std::make_shared<Flight>();
        flight->url = src.source;
        flights_.emplace(src.sha256, flight);
        leader = true;
      } else {
        flight = it->second;
      }
    }
    if (leader) {
      Status st;
      try {
        st = Download(src, dir, final_path, progress);
      } catch (const std::exception& e) {
        st = Status::Internal(what + ": " + e.what());
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        flight->done = true;
        flight->status = st;
        flights_.erase(src.sha256);
      }
      flight_done_.notify_all();
      if (!st.ok()) return st;
      return final_path;
    }

    if (progress) progress("waiting for another download of the same " + src.field + " image");
    {
      std::unique_lock<std::mutex> l(mu_);
      flight_done_.wait(l, [&] { return flight->done; });
    }
    // Another URL with the same sha256 may work where the leader's failed.
    if (!flight->status.ok() && flight->url == src.source) return flight->status;
  }
}

Status ImageResolver::Download(const ImageSource& src, const std::string& dir,
                               const std::string& final_path, const ProgressFn& progress) {
  const std::string what = Describe(src);
  RemoveStalePartials(dir, src.sha256);
  const std::string tmp = dir + "/" + src.sha256 + ".partial-" + RandomSuffix();
  UniqueFd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return Status::FromErrno("create " + tmp).WithContext(what);

  const Clock::time_point start = Clock::now();
  ProgressReporter reporter(src.field, progress);
  DownloadLimits limits{opts_.max_download_bytes, start + opts_.download_timeout, kMaxRedirects};
  Result<DownloadResult> got = HttpDownload(src.source, fd.get(), limits,
                                            [&](uint64_t b, uint64_t t) { reporter.Report(b, t); });
  Status st;
  if (!got.ok()) {
    st = got.status().WithContext(src.field);
  } else if (got->sha256 != src.sha256) {
    st = Status::FailedPrecondition(what + ": sha256 mismatch: expected " + src.sha256 + ", got " +
                                    got->sha256 + " (" + std::to_string(got->bytes) +
                                    " bytes from " + got->final_url + ")");
  } else if (got->bytes == 0) {
    st = Status::FailedPrecondition(what + ": the server sent an empty file");
  } else {
    st = CommitFile(fd.get(), tmp, final_path, dir).WithContext(what);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    log::Warn("image download failed", {{"field", src.field}, {"url", src.source},
                                        {"error", st.ToString()}});
    return st;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  log::Info("image downloaded", {{"field", src.field}, {"url", src.source},
                                 {"sha256", src.sha256}, {"bytes", got->bytes},
                                 {"seconds", seconds}});
  if (progress) {
    progress("downloaded " + src.field + ": " + FormatBytes(got->bytes) + ", sha256 verified");
  }
  return Status::Ok();
}

std::vector<ImageResolver::Root> ImageResolver::LiveRoots() const {
  std::vector<Root> out;
  for (const std::string& r : roots_) {
    Result<std::string> real = RealPath(r);
    struct stat st;
    if (!real.ok() || ::stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    out.push_back(Root{Normal(r), std::move(real).value()});
  }
  return out;
}

std::string ImageResolver::RootsForMessage() const {
  if (roots_.empty()) return "none configured: kubicle-node serve --image-root DIR";
  std::string out;
  for (const std::string& r : roots_) out += (out.empty() ? "" : ", ") + r;
  return out;
}

Result<std::string> ImageResolver::CacheDir(const ImageSource& src) const {
  const std::string& dir = opts_.cache_dir;
  if (dir.empty() || dir[0] != '/') {
    return Status::FailedPrecondition(Describe(src) + " needs the node's image cache directory, " +
                                      "and " + (dir.empty() ? "none is configured"
                                                            : Quote(dir) + " is not absolute"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::FromErrno("create image cache " + dir, ec.value()).WithContext(src.field);
  Result<std::string> real = RealPath(dir);
  if (!real.ok()) return real.status().WithContext(src.field);
  return real;
}

}  // namespace kubicle::noderuntime::nodeagent
