#include "noderuntime/daemon/admin_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file_io.h"
#include "common/unique_fd.h"
#include "noderuntime/node_util.h"

namespace kubicle::noderuntime::daemon {

namespace {

Result<std::string> Create(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::FromErrno("creating token file " + path);
  std::string token = RandomHex(32);
  const std::string line = token + "\n";
  Status st = WriteAllAt(fd.get(), 0, line.data(), line.size());
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
