#include "noderuntime/daemon/admin_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/unique_fd.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::daemon {

namespace {

Status WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("write");
    off += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> Create(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno("creating token file " + path);
  std::string token = RandomHex(32);
  Status st = WriteAll(fd.get(), token + "\n");
  if (st.ok() && ::fsync(fd.get()) != 0) st = Status::FromErrno("fsync " + path);
  if (!st.ok()) {
    ::unlink(path.c_str());
    return st.WithContext("writing token file " + path);
  }
  return token;
}

}  // namespace

Result<std::string> LoadOrCreateAdminToken(const std::string& path) {
  struct stat sb{};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno != ENOENT) return Status::FromErrno("stat " + path);
    auto created = Create(path);
    // Another process created it first: read theirs.
    if (created.ok() || created.status().error_number() != EEXIST) return created;
    if (::stat(path.c_str(), &sb) != 0) return Status::FromErrno("stat " + path);
  }
  if (!S_ISREG(sb.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  if (sb.st_mode & 077) {
    return Status::InvalidArgument("token file " + path +
                                   " is readable by group or others; chmod 600 it");
  }
  ASSIGN_OR_RETURN(std::string content, ReadFileToString(path));
  size_t b = content.find_first_not_of(" \t\r\n");
  size_t e = content.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return Status::InvalidArgument("token file " + path + " is empty");
  std::string token = content.substr(b, e - b + 1);
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::InvalidArgument("token file " + path + " holds more than one word");
  }
  return token;
}

}  // namespace kubicle::noderuntime::daemon
