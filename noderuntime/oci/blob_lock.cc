#include "noderuntime/oci/blob_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

namespace kubicle::noderuntime::oci {
namespace {

// One attempt: the locked fd, or an invalid fd when it is held elsewhere.
Result<UniqueFd> LockOnce(const std::string& path) {
  for (;;) {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd.valid()) return Status::FromErrno("opening " + path);
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK || errno == EINTR) return UniqueFd();
      return Status::FromErrno("flock " + path);
    }
    struct stat held {
    }, now{};
    if (::fstat(fd.get(), &held) != 0) return Status::FromErrno("stat " + path);
    if (::stat(path.c_str(), &now) == 0 && now.st_ino == held.st_ino && now.st_dev == held.st_dev)
      return fd;
    // Removed by its last holder after we opened it: lock the new file.
  }
}

}  // namespace

Result<BlobLock> BlobLock::Acquire(const std::string& path,
                                   std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    ASSIGN_OR_RETURN(UniqueFd fd, LockOnce(path));
    if (fd.valid()) return BlobLock(path, std::move(fd));
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::DeadlineExceeded("waiting for another download of " + path);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Result<std::optional<BlobLock>> BlobLock::TryAcquire(const std::string& path) {
  ASSIGN_OR_RETURN(UniqueFd fd, LockOnce(path));
  if (!fd.valid()) return std::optional<BlobLock>();
  return std::optional<BlobLock>(BlobLock(path, std::move(fd)));
}

BlobLock::~BlobLock() {
  // Unlink while still holding the lock: a waiter that opened this file sees
  // the path changed and starts over.
  if (fd_.valid()) ::unlink(path_.c_str());
}

}  // namespace kubicle::noderuntime::oci
