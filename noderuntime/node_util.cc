#include "noderuntime/node_util.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/file_io.h"
#include "common/hex.h"
#include "common/unique_fd.h"

namespace kubicle::noderuntime {
namespace {

bool IsAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, at most 63: a label name or value.
bool ValidLabelToken(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s)
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

bool ValidDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  auto lower_alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lower_alnum(s.front()) || !lower_alnum(s.back())) return false;
  for (char c : s)
    if (!lower_alnum(c) && c != '-') return false;
  return true;
}

bool ValidDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (start <= s.size()) {
    size_t dot = s.find('.', start);
    if (dot == std::string_view::npos) dot = s.size();
    if (!ValidDnsLabel(s.substr(start, dot - start))) return false;
    start = dot + 1;
  }
  return true;
}

Status FsyncPath(const std::string& path, int flags) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) return Status::FromErrno("open " + path);
  if (::fsync(fd.get()) != 0) return Status::FromErrno("fsync " + path);
  return Status::Ok();
}

}  // namespace

Status ValidateId(std::string_view id, std::string_view what) {
  if (ValidDnsLabel(id)) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " '" + std::string(id.substr(0, 80)) +
                                 "' is not a DNS-1123 label (lowercase letters, digits and '-', "
                                 "starting and ending with a letter or digit, at most 63)");
}

Status ValidateLabels(const Labels& labels) {
  for (const auto& [key, value] : labels) {
    std::string_view name = key;
    size_t slash = key.find('/');
    if (slash != std::string::npos) {
      if (!ValidDnsSubdomain(std::string_view(key).substr(0, slash)))
        return Status::InvalidArgument("label key '" + key + "': bad prefix");
      name = std::string_view(key).substr(slash + 1);
    }
    if (!ValidLabelToken(name))
      return Status::InvalidArgument("label key '" + key + "' is not a valid label name");
    if (!value.empty() && !ValidLabelToken(value))
      return Status::InvalidArgument("label '" + key + "': value '" + value.substr(0, 80) +
                                     "' is not a valid label value");
  }
  return Status::Ok();
}

guest::client::Deadline BoundExec(guest::protocol::ExecStartRequest* request,
                                  std::chrono::milliseconds timeout) {
  const uint64_t ms = uint64_t(std::max<int64_t>(timeout.count(), 1));
  if (request->timeout_ms == 0 || request->timeout_ms > ms) request->timeout_ms = ms;
  return guest::client::DeadlineIn(std::chrono::milliseconds(request->timeout_ms) +
                                   kExecAnswerGrace);
}

std::vector<std::string> MergedEnv(const Env& sandbox_env, const std::vector<std::string>& exec_env) {
  if (sandbox_env.empty()) return exec_env;
  Env merged = sandbox_env;
  std::vector<std::string> unnamed;  // no '=': passed on for the agent to refuse
  for (const std::string& kv : exec_env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos) unnamed.push_back(kv);
    else merged[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<std::string> out;
  for (const auto& [k, v] : merged) out.push_back(k + "=" + v);
  out.insert(out.end(), unnamed.begin(), unnamed.end());
  return out;
}

guest::protocol::Bytes RandomBytes(size_t n) {
  guest::protocol::Bytes out(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::getrandom(out.data() + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
    // EINTR retries; getrandom never fails otherwise once the pool is seeded.
  }
  return out;
}

std::string RandomHex(size_t bytes) { return HexEncode(RandomBytes(bytes)); }

Result<std::string> Sha256Files(const std::vector<std::string>& paths) {
  Sha256 h;
  std::vector<uint8_t> buf(1 << 20);
  for (const std::string& p : paths) {
    UniqueFd fd(::open(p.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Status::FromErrno("open " + p);
    for (;;) {
      ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::FromErrno("read " + p);
      if (n == 0) break;
      h.Update({buf.data(), static_cast<size_t>(n)});
    }
  }
  return "sha256:" + h.FinalHex();
}

Status AtomicWriteFile(const std::string& path, std::string_view content) {
  std::filesystem::path p(path);
  std::string dir = p.parent_path().string();
  std::string tmp = dir + "/." + p.filename().string() + ".tmp-" + RandomHex(4);
  {
    UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd) return Status::FromErrno("create " + tmp);
    if (Status s = WriteAllAt(fd.get(), 0, content.data(), content.size()); !s.ok()) {
      ::unlink(tmp.c_str());
      return s.WithContext("write " + tmp);
    }
    if (::fsync(fd.get()) != 0) {
      Status s = Status::FromErrno("fsync " + tmp);
      ::unlink(tmp.c_str());
      return s;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status s = Status::FromErrno("rename " + tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::Internal("mkdir " + path + ": " + ec.message());
  return Status::Ok();
}

Status MakePrivateDir(const std::string& path, mode_t mode) {
  RETURN_IF_ERROR(MakeDirs(path));
  return SetExactMode(path, mode);
}

Status SetExactMode(const std::string& path, mode_t mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return Status::FromErrno("stat " + path);
  if (S_ISLNK(st.st_mode)) return Status::FailedPrecondition(path + " is a symlink");
  if ((st.st_mode & 07777) == mode) return Status::Ok();
  if (::chmod(path.c_str(), mode) != 0) return Status::FromErrno("chmod " + path);
  return Status::Ok();
}

Status RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return Status::Internal("remove " + path + ": " + ec.message());
  return Status::Ok();
}

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  return out;
}

}  // namespace kubicle::noderuntime
