#include "vmm/devices/virtio/block_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

namespace kubicle::vmm::devices::virtio {

Result<std::unique_ptr<RawFileBackend>> RawFileBackend::Open(const std::string& path,
                                                             bool read_only) {
  int fd = ::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno("open disk image " + path);
  UniqueFd owned(fd);
  struct stat st{};
  if (::fstat(fd, &st) < 0) return Status::FromErrno("stat disk image " + path);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + " is not a regular file");
  return std::unique_ptr<RawFileBackend>(
      new RawFileBackend(std::move(owned), path, static_cast<uint64_t>(st.st_size), read_only));
}

Status RawFileBackend::Transfer(uint64_t offset, std::span<const iovec> iov, bool write) {
  std::vector<iovec> rest(iov.begin(), iov.end());
  size_t first = 0;
  while (first < rest.size()) {
    int cnt = static_cast<int>(std::min<size_t>(rest.size() - first, IOV_MAX));
    ssize_t n = write ? ::pwritev(fd_.get(), &rest[first], cnt, static_cast<off_t>(offset))
                      : ::preadv(fd_.get(), &rest[first], cnt, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno(write ? "pwritev" : "preadv");
    if (n == 0) return Status::DataLoss("disk image shorter than expected");
    offset += static_cast<uint64_t>(n);
    auto left = static_cast<size_t>(n);
    while (first < rest.size() && left >= rest[first].iov_len) left -= rest[first++].iov_len;
    if (left > 0) {
      rest[first].iov_base = static_cast<uint8_t*>(rest[first].iov_base) + left;
      rest[first].iov_len -= left;
    }
  }
  return Status::Ok();
}

Status RawFileBackend::ReadV(uint64_t offset, std::span<const iovec> iov) {
  return Transfer(offset, iov, false);
}

Status RawFileBackend::WriteV(uint64_t offset, std::span<const iovec> iov) {
  if (read_only_) return Status::PermissionDenied("disk is read-only");
  return Transfer(offset, iov, true);
}

Status RawFileBackend::Flush() {
  if (read_only_) return Status::Ok();
  if (::fdatasync(fd_.get()) < 0) return Status::FromErrno("fdatasync");
  return Status::Ok();
}

}  // namespace kubicle::vmm::devices::virtio
