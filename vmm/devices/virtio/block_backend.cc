#include "vmm/devices/virtio/block_backend.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "common/file_io.h"

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
  return TransferAll(fd_.get(), offset, iov, write, "disk image shorter than expected");
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
